"""Extender: the server's side of plan -> reserve -> steer -> bind, around the sync core.

Handlers call in here; everything that waits (the bind gate), talks to the API server (binds,
wake-ups, events) or logs lives here, while decisions stay in `GangScheduler`. All of it runs
on one event loop, so each call into the core is atomic.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

import structlog

from extender.core.decisions import BIND, DONE, R_NOT_LEADER, REJECT, WAIT, BindDecision, PlanEvent, Released
from extender.core.recovery import Recovery
from extender.core.scheduler import GangScheduler
from extender.model.errors import InvalidObject
from extender.model.keys import GroupKey
from extender.model.pod import PodInfo, parse_pod
from extender.placement import INCOMPLETE, NO_CAPACITY, NO_DOMAIN, Shortfall
from extender.server import wire
from extender.server.metrics import (
    BIND_API_ERROR,
    BIND_CALL_BUDGET,
    BIND_GATE_TIMEOUT,
    BIND_NOT_LEADER,
    BIND_PLAN_RELEASED,
    BIND_POD_GONE,
    BIND_REJECTED,
    BIND_SHUTDOWN,
    BIND_SUPERSEDED,
    Metrics,
)

log = structlog.get_logger("topogang")
EVICT_RETRY = 2.0  # seconds between evictions a PodDisruptionBudget refused
BLOCKED = "blocked"  # KubeActions.evict: a PodDisruptionBudget refused it for now

ROOM_WAKE_DELAY = 1.0  # seconds: node changes come in bursts; members parked for room wake once
PODGROUP_API = "scheduling.topogang.io/v1alpha1"

# API statuses after which no retry can bind the pod: it is gone (404), or its namespace is being
# deleted (403 "being terminated"); its reservation is dropped instead of held for a retry.
BIND_HOPELESS = frozenset({403, 404})


class Actions(Protocol):
    """What the extender asks of the API server (extender.kube.actions.KubeActions)."""

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None: ...

    async def wake(self, pods: Sequence[tuple[str, str]], generation: int) -> None: ...

    async def nominate(
        self, pods: Sequence[tuple[str, str]], generation: int, node_of: Callable[[str, str], str | None]
    ) -> None: ...

    async def event(self, involved: Mapping[str, str], reason: str, message: str, type: str = "Normal") -> None: ...

    async def evict(self, namespace: str, name: str, uid: str) -> str: ...


def _ignore(group: str) -> None:
    pass


class Extender:
    def __init__(
        self,
        scheduler: GangScheduler,
        actions: Actions,
        *,
        bind_timeout: float,
        call_budget: float = 20.0,
        recovery_grace: float = 30.0,
        metrics: Metrics | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.lookup = scheduler.lookup
        self.actions = actions
        self.bind_timeout = bind_timeout  # silence: no new member at the gate this long closes it
        self.call_budget = call_budget  # the longest one bind call waits (under kube-scheduler's httpTimeout)
        self.metrics = metrics if metrics is not None else Metrics()
        # Told the group whenever a decision may have changed its status (the PodGroup writer).
        self.changed: Callable[[str], None] = _ignore
        self._first_seen: dict[str, float] = {}  # group -> when a member was first filtered (monotonic)
        self._waiting: dict[str, asyncio.Future[str]] = {}  # pod -> its bind's answer
        self._binding: dict[str, asyncio.Future[str]] = {}  # pod -> its Binding POST in flight
        self._gates: dict[str, asyncio.TimerHandle] = {}  # group -> its gate's silence timer
        self._refused: dict[str, str] = {}  # pod -> the last reason it was refused
        self._pending_logged: dict[str, str] = {}  # group -> the pending reason last logged
        self._refreshed: dict[str, str] = {}  # group -> the refusal its parked members were woken to see
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake_soon = False
        self._room_wake: asyncio.TimerHandle | None = None
        scheduler.lookup.subscribe(self._changed_object)
        self.recovery = Recovery(bind_timeout + recovery_grace)  # gangs found part-bound at start
        scheduler.lookup.subscribe(self._state_changed)

    # -- filter and prioritize -------------------------------------------------------------------

    def _pod(self, args: wire.NodeArgs) -> PodInfo:
        pod = self.lookup.pod(args.pod_key)
        if pod is not None:
            return pod  # kube-scheduler's copy is the one our watch delivered
        try:
            return parse_pod(args.pod)
        except InvalidObject as exc:
            raise wire.WireError(f"ExtenderArgs.Pod: {exc}") from None

    def filter(self, args: wire.NodeArgs) -> bytes:
        pod = self._pod(args)
        start = time.perf_counter()
        result = self.scheduler.filter(pod, args.names, time.monotonic(), args.nominated)
        if result.event is not None:
            self._decided(result.event, time.perf_counter() - start)
        if result.group is not None and (result.event is not None or not result.nodes):
            self._seen(result.group)  # not on the steered path, which is hot
        self._fail_dropped(BIND_PLAN_RELEASED)
        if result.wake:
            self._wake(result.wake, result.group or "")
        if result.steer is not None:  # the pod is sent to (or passed on) this node: nominate it there
            generation = self.scheduler.plans.generation(result.group or "")
            steer = result.steer
            self._spawn(self.actions.nominate([(pod.namespace, pod.name)], generation, lambda *_: steer), "nominate")
        if result.nodes:
            self._refused.pop(pod.key, None)
        elif result.steer is None:
            reason = result.reason
            if self._refused.get(pod.key) != reason:
                self._refused[pod.key] = reason
                if self._marks_unschedulable(result.group):
                    self._emit(pod, "GangNotScheduled", reason, "Warning")
            if result.event is not None and result.group is not None:
                self._refresh_parked(result.group, reason)
        return wire.encode_filter(args, result.nodes, result.failed, result.unresolvable)

    def _refresh_parked(self, group: str, reason: str) -> None:
        """GROUP was just planned and refused with REASON. Its members kube-scheduler parked for an
        earlier reason (most often "gang k/n pods present", refused before the last member came)
        are retried by it only on a cluster event or its 5-minute flush, and until then their
        Events and PodScheduled condition say the old reason: wake them once, to be refused with
        this one. Once per change of the gang's reason, so a gang that stays infeasible costs no
        retries; never for an incomplete gang, where each arrival changes the count and waking
        the others would only refuse them again (n^2 wake-ups for a gang created pod by pod)."""
        if self._refreshed.get(group) == reason:
            return
        self._refreshed[group] = reason
        why = self.scheduler.reasons.get(group)
        if isinstance(why, Shortfall) and why.kind == INCOMPLETE:
            return
        stale = [p for p in self.lookup.members(group) if self._refused.get(p, reason) != reason]
        if stale:
            self._wake(stale, group)

    def decided(self, event: PlanEvent, seconds: float) -> None:
        """A planning decision made outside kube-scheduler's calls (gates mode's ungater): the
        same follow-up as in a filter call (a preemption's or a repair's evictions included)."""
        self._decided(event, seconds)

    def prioritize(self, args: wire.NodeArgs) -> bytes:
        return wire.encode_priorities(self.scheduler.prioritize(self._pod(args), args.names))

    def preempt(self, args: wire.PreemptArgs) -> bytes:
        """Gang members: no victims for kube-scheduler (preempting for one pod cannot seat a
        gang); topogang preempts for the whole gang instead, evicting its own victims. Plain
        pods: kube-scheduler's own choice, unchanged."""
        key = args.pod_key
        if self.lookup.pod(key) is None:  # the request can be ahead of our watch
            with contextlib.suppress(InvalidObject):
                pod = parse_pod(args.pod)
                if self.lookup.was_deleted(pod):  # or behind it
                    return wire.encode_victims({})
                self.scheduler.observe_pod(pod)
        if self.lookup.group_of(key) is None:
            # a pod naming a gang that cannot be resolved yet is no plain pod either
            return wire.encode_victims({} if self.lookup.waiting(key) is not None else args.victims)
        start = time.perf_counter()
        event = self.scheduler.preempt(key, time.monotonic())
        if event is not None:
            self._decided(event, time.perf_counter() - start)
            if event.outcome == "planned":  # room was there after all: the members come to take it
                self._wake_members(event.group)
        return wire.encode_victims({})

    def _decided(self, event: PlanEvent, seconds: float) -> None:
        self.metrics.observe_plan(event.outcome, seconds)
        self._log_decision(event, seconds)
        self.changed(event.group)
        if event.preemption is not None:
            self._preempting(event)
        if event.repair is not None:
            self._repairing(event)

    # -- preemption ------------------------------------------------------------------------------

    def _preempting(self, event: PlanEvent) -> None:
        """A gang's preemption plan was made: evict its victims, say so on them and on the gang."""
        p = event.preemption
        assert p is not None
        self.metrics.preemptions.inc()
        self.metrics.preemption_victims.inc(len(p.pods))
        victims = [pod for key in p.pods if (pod := self.lookup.pod(key)) is not None]
        for pod in victims:
            self._emit(pod, "Preempted", f"Preempted by {event.group} for {p.domain}", "Normal")
        for member in self._unbound_members(event.group):
            self._emit(member, "Preempting", event.reason, "Normal")
        self._spawn(self._evict_all(event.group, victims, self._nominated_victim(event.group)), "eviction")

    def _nominated_victim(self, group: str) -> Callable[[str], bool]:
        def wanted(key: str) -> bool:
            nom = self.scheduler.preempting.nomination(group)
            return nom is not None and key in nom.pending

        return wanted

    # -- repair ------------------------------------------------------------------------------------

    def _repairing(self, event: PlanEvent) -> None:
        """A broken part of a running gang moves whole: evict its running pods, say so."""
        r = event.repair
        assert r is not None
        self.metrics.repairs.inc()
        moved = [pod for key in r.moved if (pod := self.lookup.pod(key)) is not None]
        for pod in moved:
            self._emit(pod, "GangRepair", f"Evicted so that {event.group} can {r.describe()}", "Normal")
        self._emit_group(event.group, "GangRepair", r.describe(), "Warning")
        repairs = self.scheduler.repairs
        self._spawn(self._evict_all(event.group, moved, lambda key: repairs.pending(event.group, key)), "eviction")

    def _expire_repairs(self, now: float) -> None:
        """Gangs no repair mended in time: say so; evict those that ask for it, whole."""
        for group, pods in self.scheduler.expire_repairs(now):
            why = self.scheduler.reasons.text(group)
            self.metrics.unrepairable.inc()
            log.warning("gang could not be repaired", group=group, evicting=[p.key for p in pods][:20], reason=why)
            self._emit_group(group, "Unrepairable", why, "Warning")
            if pods:
                self._spawn(self._evict_all(group, pods, lambda _: False), "eviction")
            self.changed(group)

    async def _evict_all(self, group: str, victims: Sequence[PodInfo], wanted: Callable[[str], bool]) -> None:
        """Evict every pod given; those a PodDisruptionBudget protects now are tried again while
        WANTED(pod) says they still must go (the room held for the gang is not released)."""
        left = list(victims)
        while left:
            outcomes = await asyncio.gather(
                *(self.actions.evict(p.namespace, p.name, p.uid) for p in left), return_exceptions=True
            )
            blocked = []
            for pod, outcome in zip(left, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    log.warning("eviction failed", group=group, pod=pod.key, error=str(outcome))
                    blocked.append(pod)
                elif outcome == BLOCKED:
                    blocked.append(pod)
            done = [p.key for p in left if p not in blocked]
            if done:
                log.info("evicted", group=group, pods=done[:20], count=len(done))
            left = [p for p in blocked if wanted(p.key)]
            if left:
                log.info("eviction blocked", group=group, pods=[p.key for p in left][:10], retry_s=EVICT_RETRY)
                await asyncio.sleep(EVICT_RETRY)

    def _changed_object(self, kind: str, key: object) -> None:
        """A victim pod changed or went: wake its gang's members soon if it was the last. A node
        came or changed, or a pod went: wake the members parked for want of room (at most once a
        second)."""
        if kind == "node" or (kind == "pod" and isinstance(key, str) and self.lookup.pod(key) is None):
            self._room_changed()  # a node came or changed, or a pod went: there may be room
            if kind == "node":
                return
        if kind != "pod" or self._wake_soon or not isinstance(key, str) or not self.scheduler.preempting.is_victim(key):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._wake_soon = True
        loop.call_soon(self._wake_preempted)

    def _wake_preempted(self) -> None:
        self._wake_soon = False
        for group in self.scheduler.preempting.take_ready():
            log.info("victims gone", group=group)
            self.changed(group)
            self._wake_members(group)

    def _room_changed(self) -> None:
        # kube-scheduler requeues its parked pods on a node event, and may retry them before our
        # watch has seen that node: refused again, they would wait for the next event or the
        # 5-minute flush. Once we have seen the node, we requeue them ourselves.
        if self._room_wake is not None or not self._refused:
            return
        with contextlib.suppress(RuntimeError):  # no running loop (a test of the core alone)
            self._room_wake = asyncio.get_running_loop().call_later(ROOM_WAKE_DELAY, self._wake_parked)

    def _wake_parked(self) -> None:
        self._room_wake = None
        short = [p for p in self._refused if (g := self.lookup.group_of(p)) is not None and self._wants_room(g)]
        for p in short:
            self._refused.pop(p, None)
        if short:
            names = [(k.namespace, k.name) for k in map(GroupKey.parse, short)]
            self._spawn(self.actions.wake(names, self.scheduler.plans.next_generation()), "wake")

    def _wants_room(self, group: str) -> bool:
        reason = self.scheduler.reasons.get(group)
        return isinstance(reason, Shortfall) and reason.kind in (NO_DOMAIN, NO_CAPACITY)

    def _unbound_members(self, group: str) -> list[PodInfo]:
        pods = (self.lookup.pod(k) for k in self.lookup.members(group))
        return [p for p in pods if p is not None and p.node_name is None]

    def _wake_members(self, group: str) -> None:
        """Requeue every unbound member of GROUP: room is waiting for them."""
        parked = self._unbound_members(group)
        for p in parked:
            self._refused.pop(p.key, None)
        if parked:
            pods = [(p.namespace, p.name) for p in parked]
            self._spawn(self.actions.wake(pods, self.scheduler.plans.next_generation()), "wake")

    # -- bind ------------------------------------------------------------------------------------

    async def bind(self, args: wire.BindArgs) -> bytes:
        key = args.pod_key
        cached = self.lookup.pod(key)
        if cached is not None and args.uid and cached.uid and cached.uid != args.uid:
            # The default binder's uid precondition: a call for a pod since replaced binds nothing.
            log.info("bind refused", pod=key, node=args.node, reason="uid changed", uid=args.uid, now=cached.uid)
            self.metrics.bind_failed(BIND_REJECTED)
            return wire.encode_binding(f"topogang: pod {key} is now another pod (uid {cached.uid}, not {args.uid})")
        in_flight = self._binding.get(key)
        if in_flight is not None:  # its gate opened while kube-scheduler was retrying the call
            error = await asyncio.shield(in_flight)
            if not error and not self._bound_to(key, args.node):
                error = f"topogang: the pod was bound to another node, not {args.node}"
            return wire.encode_binding(error)
        decision = self.scheduler.bind(key, args.node, time.monotonic())
        if decision.action == DONE:
            return wire.encode_binding("")
        if decision.action == REJECT:
            self._rejected(key, args.node, decision)
            return wire.encode_binding(decision.error)
        if decision.action == BIND:
            errors = await self._bind_all(decision.bind)
            return wire.encode_binding(errors.get(key, ""))
        assert decision.action == WAIT
        return wire.encode_binding(await self._wait(key, args.node))

    def _rejected(self, key: str, node: str, decision: BindDecision) -> None:
        self.metrics.bind_failed(BIND_REJECTED)
        if decision.event is None:
            log.info("bind refused", pod=key, node=node, reason=decision.error)
            return
        # The gate found planned nodes gone when the minimum was all there: none bound, planned again.
        group = decision.event.group
        log.warning("bind gate found planned nodes gone", group=group, nodes=list(decision.stale), pod=key)
        self._log_decision(decision.event, 0.0)
        self._fail_dropped(BIND_PLAN_RELEASED)
        self.changed(group)
        message = f"{decision.error.removeprefix('topogang: ')}: {decision.event.outcome}"
        self._emit_group(group, "GangReplanned", message, "Warning")

    async def _wait(self, key: str, node: str) -> str:
        """Hold this bind call at its gang's gate for at most the call budget. Past it the call is
        answered with a retryable error while the pod stays arrived (its node and reservation
        kept): kube-scheduler requeues it, and the gate binds it with the rest either way."""
        group = self.lookup.group_of(key) or ""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[str] = loop.create_future()
        old = self._waiting.pop(key, None)
        if old is not None and not old.done():
            old.set_result("topogang: superseded by a newer bind call for this pod")
            self.metrics.bind_failed(BIND_SUPERSEDED)
        self._waiting[key] = future
        budget = loop.call_later(self.call_budget, self._call_budget_spent, key, node, group, future)
        future.add_done_callback(lambda _: budget.cancel())
        if group not in self._gates:
            self._gates[group] = loop.call_later(self.bind_timeout, self._gate_expired, group)
        log.debug("bind waiting at the gate", pod=key, node=node, group=group)
        return await future

    def _call_budget_spent(self, key: str, node: str, group: str, future: asyncio.Future[str]) -> None:
        if future.done():
            return
        if self._waiting.get(key) is future:
            del self._waiting[key]
        arrived, total = self.scheduler.gates.progress(group)
        future.set_result(
            f"topogang: waiting at gang {group}'s bind gate ({arrived}/{total} of the minimum arrived);"
            f" the pod keeps its place on {node} and binds with the gang"
        )
        self.metrics.bind_failed(BIND_CALL_BUDGET)

    async def _bind_all(self, batch: Sequence[tuple[str, str]]) -> dict[str, str]:
        """Bind every pod of a released gate at once; answer the calls that were waiting."""
        groups = {g for p, _ in batch if (g := self.lookup.group_of(p))}
        for group in groups:
            timer = self._gates.pop(group, None)
            if timer is not None:
                timer.cancel()
        start = time.perf_counter()
        results = await asyncio.gather(*(self._bind_one(p, n) for p, n in batch))
        errors = {p: e for (p, _), e in zip(batch, results, strict=True) if e}
        for (pod, _), error in zip(batch, results, strict=True):
            waiter = self._waiting.pop(pod, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(error)
        now = time.monotonic()
        for group in groups:
            first = self._first_seen.pop(group, None)
            if first is not None and not any(self.lookup.group_of(p) == group for p in errors):
                self.metrics.gang_wait.observe(now - first)  # the gate opened: the whole minimum is bound
            self.changed(group)
        if len(batch) > 1 or groups:
            log.info(
                "bound",
                group=sorted(groups)[0] if len(groups) == 1 else sorted(groups),
                pods=len(batch),
                failed=len(errors),
                nodes=sorted({n for _, n in batch}),
                bind_ms=round((time.perf_counter() - start) * 1000, 1),
                **({"errors": dict(list(errors.items())[:5])} if errors else {}),
            )
        return errors

    def _bound_to(self, pod_key: str, node: str) -> bool:
        pod = self.lookup.pod(pod_key)
        return pod is not None and pod.node_name == node

    async def _bind_one(self, pod_key: str, node: str) -> str:
        """POST one Binding; a bind call for the same pod that comes meanwhile shares its answer."""
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._binding[pod_key] = future
        try:
            error = await self._post_binding(pod_key, node)
        except BaseException:
            future.cancel()  # shutting down: whoever shares it is cancelled too
            raise
        finally:
            del self._binding[pod_key]
        future.set_result(error)
        return error

    async def _post_binding(self, pod_key: str, node: str) -> str:
        pod = self.lookup.pod(pod_key)
        if pod is None:
            self.metrics.bind_failed(BIND_POD_GONE)
            return "topogang: the pod no longer exists"
        try:
            await self.actions.bind(pod.namespace, pod.name, pod.uid, node)
        except Exception as exc:  # an API error: this pod's call fails, kube-scheduler retries it
            self.metrics.bind_failed(BIND_API_ERROR)
            if getattr(exc, "status", None) in BIND_HOPELESS:
                self.scheduler.forget_pod(pod_key)  # no retry can bind it: its room goes back
            return f"topogang: binding {pod_key} to {node} failed: {exc}"
        self.scheduler.observe_pod(replace(pod, node_name=node))
        return ""

    def _gate_expired(self, group: str) -> None:
        """GROUP's silence timer fired: wait on while a new member came within the bind timeout,
        else close the gate (no partial gang: the plan is released, the waiting calls fail)."""
        now = time.monotonic()
        left = self.scheduler.gates.silence_left(group, now, self.bind_timeout)
        if left is not None and left > 0:
            self._gates[group] = asyncio.get_running_loop().call_later(left, self._gate_expired, group)
            return
        self._gates.pop(group, None)
        missing = self.scheduler.gates.missing(group)
        waiting = self.scheduler.gate_timeout(group, self.bind_timeout) if left is not None else []
        if waiting:
            self.metrics.gate_timeouts.inc()
            self.changed(group)
            log.warning(
                "bind gate timed out",
                group=group,
                arrived=len(waiting),
                missing=missing[:10],
                reason=self.scheduler.reasons.text(group),
            )
        self._fail_dropped(BIND_GATE_TIMEOUT)

    def _fail_dropped(self, why: str) -> None:
        """Answer the bind calls waiting at gates the core closed; WHY is the metric's reason."""
        for pod, reason in self.scheduler.gates.take_dropped():
            waiter = self._waiting.pop(pod, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(f"topogang: {reason.render()}")
                self.metrics.bind_failed(why)

    def _seen(self, group: str) -> None:
        if group not in self._first_seen:
            self._first_seen[group] = time.monotonic()

    # -- housekeeping ---------------------------------------------------------------------------

    def expire(self) -> None:
        """The periodic sweep: plans that stopped progressing, and memory of pods and gangs gone."""
        now = time.monotonic()
        for group, waiting in self.scheduler.expire(now).items():
            reason = self.scheduler.reasons.text(group)
            log.warning("plan expired", group=group, waiting=len(waiting), reason=reason)
            self.changed(group)
        for nom in self.scheduler.expire_preemptions(now):
            self.metrics.preemption_timeouts.inc()
            log.warning("preemption timed out", group=nom.group, reason=self.scheduler.reasons.text(nom.group))
            self.changed(nom.group)
        self._wake_preempted()
        self._expire_repairs(now)
        self._fail_dropped(BIND_PLAN_RELEASED)
        self._evict_overdue()
        for key in [k for k in self._refused if self.lookup.pod(k) is None]:
            del self._refused[key]
        groups = set(self.lookup.groups())
        for group in [g for g in self._pending_logged if g not in groups]:
            del self._pending_logged[group]
        for group in [g for g in self._refreshed if g not in groups]:
            del self._refreshed[group]
        for group in [g for g in self._first_seen if g not in groups]:
            del self._first_seen[group]

    def recover(self) -> None:
        """This replica starts leading: plan the rest of every gang found part-bound (a crash
        between a gate's binds) and give each the bind timeout plus a grace to reach its minimum."""
        events = self.recovery.start(self.scheduler, time.monotonic())
        for event in events:
            self._log_decision(event, 0.0)
            self.changed(event.group)
        if self.recovery.deadlines:
            log.warning(
                "gangs found below their minimum",
                groups=sorted(self.recovery.deadlines)[:20],
                count=len(self.recovery.deadlines),
                within_s=self.recovery.within,
            )

    def _evict_overdue(self) -> None:
        """Part-bound gangs that did not reach their minimum in time: evict what was bound, so no
        gang runs below its minimum; the PodGroup status and an Event say why."""
        for group, bound in self.recovery.overdue(self.scheduler, time.monotonic()).items():
            why = self.scheduler.reasons.text(group)
            log.warning("evicting a gang left below its minimum", group=group, pods=bound[:20], reason=why)
            pods = [pod for key in bound if (pod := self.lookup.pod(key)) is not None]
            self._spawn(self._evict_below_minimum(group, pods), "eviction")
            self._emit_group(group, "PartialGangEvicted", why, "Warning")
            self.changed(group)
        self._fail_dropped(BIND_PLAN_RELEASED)

    async def _evict_below_minimum(self, group: str, pods: Sequence[PodInfo]) -> None:
        outcomes = await asyncio.gather(
            *(self.actions.evict(p.namespace, p.name, p.uid) for p in pods), return_exceptions=True
        )
        for pod, outcome in zip(pods, outcomes, strict=True):
            if isinstance(outcome, BaseException) or outcome == BLOCKED:
                why = str(outcome) if isinstance(outcome, BaseException) else "a PodDisruptionBudget refused it"
                log.warning("could not evict a pod of a gang below its minimum", group=group, pod=pod.key, error=why)

    def demote(self) -> None:
        """This replica stopped being the leader: drop every plan and reservation at once (the
        new leader plans again from what the API server shows) and fail the binds waiting."""
        for timer in self._gates.values():
            timer.cancel()
        self._gates.clear()
        self.scheduler.release_all(Released(R_NOT_LEADER))
        self.scheduler.preempting.drop_all()
        self._fail_dropped(BIND_NOT_LEADER)
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_result("topogang: this replica is no longer the leader")
                self.metrics.bind_failed(BIND_NOT_LEADER)
        self._waiting.clear()
        self._first_seen.clear()
        self._pending_logged.clear()
        self._refreshed.clear()
        self.recovery.deadlines.clear()

    async def close(self) -> None:
        for timer in self._gates.values():
            timer.cancel()
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_result("topogang: shutting down")
                self.metrics.bind_failed(BIND_SHUTDOWN)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, work: Awaitable[None], what: str) -> None:
        async def run() -> None:
            try:
                await work
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning(f"{what} failed", error=str(exc))

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _wake(self, pods: Sequence[str], group: str) -> None:
        """Requeue members kube-scheduler parked as unschedulable: an update to the pod itself
        moves it back to the active queue at once (a new pod elsewhere would not). With
        nomination on, every planned member is also nominated on its planned node, in the same
        write, so that its next attempt tries that node first, alone."""
        planned = self.scheduler.reserved(group) if self.scheduler.steering.enabled else {}
        steer = [p for p in pods if p in planned]  # each one's node is asked as its write goes out
        parked = [p for p in pods if p in self._refused and p not in planned]
        for p in [*parked, *steer]:
            self._refused.pop(p, None)
        generation = self.scheduler.plans.generation(group)
        if steer:
            keys = [GroupKey.parse(p) for p in steer]
            self._spawn(
                self.actions.nominate([(k.namespace, k.name) for k in keys], generation, self._nomination_target),
                "nominate",
            )
        if parked:
            names = [(k.namespace, k.name) for k in map(GroupKey.parse, parked)]
            self._spawn(self.actions.wake(names, generation), "wake")

    def _nomination_target(self, namespace: str, name: str) -> str | None:
        """Asked as each nomination goes out: the plan may have traded the pod's node since, or
        kube-scheduler taken it there already (then nothing is written)."""
        return self.scheduler.nomination_target(f"{namespace}/{name}")

    def _emit_group(self, group: str, reason: str, message: str, kind: str) -> None:
        """An Event about GROUP's PodGroup (topogang writes one for every gang of a workload)."""
        key = GroupKey.parse(group)
        involved = {"apiVersion": PODGROUP_API, "kind": "PodGroup", "namespace": key.namespace, "name": key.name}
        self._spawn(self.actions.event(involved, reason, message, kind), "event")

    def _state_changed(self, kind: str, key: object) -> None:
        """A queue appeared or went away: the pods refused for their gang's queue are parked by
        kube-scheduler, and nothing else would requeue them soon."""
        if kind != "queue" or not self._refused:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a test driving the core): nothing parked to wake
        by_group: dict[str, list[str]] = {}
        for pod in self._refused:
            group = self.lookup.group_of(pod)
            if group is not None:
                by_group.setdefault(group, []).append(pod)
        for group, pods in by_group.items():
            self._wake(pods, group)

    def _marks_unschedulable(self, group: str | None) -> bool:
        """PodGroup spec.markUnschedulable: false (seed 001) asks for no unschedulable Events on
        its pods; kube-scheduler's own FailedScheduling Events are not topogang's to withhold."""
        if group is None or not self.lookup.has_pods(group):
            return True
        spec = self.lookup.view(group).spec
        return spec is None or spec.mark_unschedulable is not False

    def _emit(self, pod: PodInfo, reason: str, message: str, kind: str) -> None:
        involved = {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name, "uid": pod.uid}
        self._spawn(self.actions.event(involved, reason, message, kind), "event")

    def _log_decision(self, event: PlanEvent, seconds: float) -> None:
        fields = event.fields()
        fields["plan_ms"] = round(seconds * 1000, 2)
        if event.outcome in ("preempting", "repairing"):
            self._pending_logged.pop(event.group, None)
            log.info(f"gang {event.outcome}", **fields)
        elif event.outcome != "pending":
            self._pending_logged.pop(event.group, None)
            log.info("gang placed", **fields)
        elif self._pending_logged.get(event.group) != event.reason:
            # Every member refused re-checks its gang; the line is written when the reason changes.
            self._pending_logged[event.group] = event.reason
            log.info("gang pending", **fields)
        else:
            log.debug("gang pending", **fields)
