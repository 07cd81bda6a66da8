"""Extender: the server's side of plan -> reserve -> steer -> bind, around the sync core.

Handlers call in here; everything that waits (the bind gate), talks to the API server (binds,
wake-ups, events) or logs lives in the server, while decisions stay in `GangScheduler`. All of
it runs on one event loop, so each call into the core is atomic. This class answers the verbs
and runs the sweep; the I/O is split along what it is for, each part with its own state:

  binds      binds.BindCalls      bind calls waiting at the gate, the Bindings, the gate's timers
  wakeups    wakeups.Wakeups      pods kube-scheduler parked, requeued; planned members nominated
  evictions  evictions.Evictions  victims, repairs, unrepairable and part-bound gangs evicted
  report     reporting.Reporter   Events, one log line per decision, the PodGroup writer's nudge
  tasks      tasks.Tasks          the background API calls, cancelled at shutdown

A PodDisruptionBudget that changes may let a gang preempt that only budgets kept from it: its
search runs again here (BUDGET_RETRY_DELAY after the change, once for a burst), as kube-scheduler's
preempt call would run it. kube-scheduler parks such members in its own resource filter (the
cluster is full), where only a pod's deletion or its 5-minute flush requeues them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import structlog

from extender.core.decisions import R_NOT_LEADER, PlanEvent, Released
from extender.core.held_room import rfc3339
from extender.core.scheduler import GangScheduler
from extender.model.errors import InvalidObject
from extender.model.pod import PodInfo, parse_pod
from extender.server import wire
from extender.server.actions import Actions
from extender.server.binds import BindCalls
from extender.server.evictions import Evictions
from extender.server.metrics import BIND_PLAN_RELEASED, Metrics
from extender.server.reporting import Reporter, unbound_members
from extender.server.tasks import Tasks
from extender.server.wakeups import Wakeups

log = structlog.get_logger("topogang")
BUDGET_RETRY_DELAY = 1.0  # seconds: budgets change in bursts (a rollout); blocked gangs search once


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
        leading: Callable[[], bool] = lambda: True,
    ) -> None:
        """LEADING: whether this replica leads now; a follower's sweep decides nothing."""
        self.scheduler = scheduler
        self.leading = leading
        self.lookup = scheduler.lookup
        self.metrics = metrics if metrics is not None else Metrics()
        self.tasks = Tasks()
        self.report = Reporter(self.lookup, actions, self.tasks)
        self.wakeups = Wakeups(scheduler, actions, self.tasks, self.report)
        self.binds = BindCalls(
            scheduler, actions, self.report, self.metrics, bind_timeout=bind_timeout, call_budget=call_budget
        )
        self.evictions = Evictions(
            scheduler, actions, self.tasks, self.report, self.metrics, recovery_within=bind_timeout + recovery_grace
        )
        self._budget_retry: asyncio.TimerHandle | None = None
        self.lookup.subscribe(self._changed)

    # -- the verbs -------------------------------------------------------------------------------

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
            self._decided(result.event, time.perf_counter() - start, whole=not result.quick)
        if result.bind:  # planned just now and bound ahead of its members' calls, all of it
            self.tasks.spawn(self.binds.ahead(result.bind), "bind ahead")
        if result.group is not None and (result.event is not None or not result.nodes):
            self.binds.seen(result.group)  # not on the steered path, which is hot
        self.binds.fail_dropped(BIND_PLAN_RELEASED)
        self.wakeups.filtered(pod, result)
        if self.scheduler.reserving.take_freed():  # a gang holding room was planned: its room is let go
            self.wakeups.room_freed()
        return wire.encode_filter(args, result.nodes, result.failed, result.unresolvable)

    def prioritize(self, args: wire.NodeArgs) -> bytes:
        return wire.encode_priorities(self.scheduler.prioritize(self._pod(args), args.names))

    def preempt(self, args: wire.PreemptArgs) -> bytes:
        """Gang members: no victims for kube-scheduler (preempting for one pod cannot seat a
        gang); topogang preempts for the whole gang instead, evicting its own victims. Plain
        pods: kube-scheduler's own choice, but for the nodes where it would evict a pod of a gang
        that started overdue (core/waiting.py)."""
        key = args.pod_key
        if self.lookup.pod(key) is None:  # the request can be ahead of our watch
            with contextlib.suppress(InvalidObject):
                pod = parse_pod(args.pod)
                if self.lookup.was_deleted(pod):  # or behind it
                    return wire.encode_victims({})
                self.scheduler.observe_pod(pod)
        if self.lookup.group_of(key) is None:
            # a pod naming a gang that cannot be resolved yet is no plain pod either
            return wire.encode_victims({} if self.lookup.waiting(key) is not None else self._sparing(args.victims))
        self._preempt_for(key)
        return wire.encode_victims({})

    def _sparing(self, victims: dict[str, Any]) -> dict[str, Any]:
        """VICTIMS (node -> MetaVictims) without the nodes where a pod of a gang that started
        overdue would be evicted: work that is not overdue may not evict such a gang."""
        protected = self.scheduler.reserving.waits.protected
        if not protected:
            return victims
        uids = {p.uid for g in protected for k in self.lookup.members(g) if (p := self.lookup.pod(k)) is not None}
        return {
            node: v
            for node, v in victims.items()
            if not any(isinstance(m, dict) and m.get("UID") in uids for m in (v or {}).get("Pods") or ())
        }

    def _preempt_for(self, key: str) -> None:
        """The gang of member KEY preempts for itself now, if it should (GangScheduler.preempt)."""
        start = time.perf_counter()
        event = self.scheduler.preempt(key, time.monotonic())
        if event is not None:
            self._decided(event, time.perf_counter() - start)
            if event.outcome == "planned":  # room was there after all: the members come to take it
                self.wakeups.wake_members(event.group)

    def _changed(self, kind: str, key: object) -> None:
        if kind != "budget" or self._budget_retry is not None:
            return
        with contextlib.suppress(RuntimeError):  # no running loop (a test of the core alone)
            self._budget_retry = asyncio.get_running_loop().call_later(BUDGET_RETRY_DELAY, self.retry_blocked)

    def retry_blocked(self) -> None:
        """Each gang only PodDisruptionBudgets kept from preempting searches again, for one of its
        members not bound yet (the core forgot its fruitless search when the budget changed)."""
        self._budget_retry = None
        if not self.leading():
            return
        for group in self.scheduler.preempting.budget_blocked():
            member = next(iter(unbound_members(self.lookup, group)), None)
            if member is not None:
                self._preempt_for(member.key)

    def decided(self, event: PlanEvent, seconds: float) -> None:
        """A planning decision made outside kube-scheduler's calls (gates mode's ungater): the
        same follow-up as in a filter call (a preemption's or a repair's evictions included)."""
        self._decided(event, seconds)

    def _decided(self, event: PlanEvent, seconds: float, whole: bool = True) -> None:
        """WHOLE: the gang was built for this decision (not: answered from a count of its pods,
        whose warnings are not read again)."""
        self.metrics.observe_plan(event.outcome, seconds)
        self.report.decision(event, seconds, warnings=whole)
        self.report.changed(event.group)
        self.evictions.decided(event)

    # -- housekeeping ---------------------------------------------------------------------------

    def expire(self) -> None:
        """The periodic sweep: plans that stopped progressing, and memory of pods and gangs gone.
        Only the leader's: a follower holds nothing (demote dropped it) and writes nothing."""
        if not self.leading():
            return
        now = time.monotonic()
        for group, waiting in self.scheduler.expire(now).items():
            reason = self.scheduler.reasons.text(group)
            log.warning("plan expired", group=group, waiting=len(waiting), reason=reason)
            self.report.changed(group)
        for nom in self.scheduler.expire_preemptions(now):
            self.metrics.preemption_timeouts.inc()
            log.warning("preemption timed out", group=nom.group, reason=self.scheduler.reasons.text(nom.group))
            self.report.changed(nom.group)
        for move in self.scheduler.defragmenting.moves.expire(now):
            log.warning(
                "moved pod's room released",
                group=move.group,
                pod=move.pod,
                node=move.node,
                reason="no replacement pod of its controller claimed it in time",
            )
        self.wakeups.wake_preempted()
        self._reserve(now)
        self.evictions.expire_repairs(now)
        self.binds.fail_dropped(BIND_PLAN_RELEASED)
        self.evictions.evict_overdue()
        self.binds.fail_dropped(BIND_PLAN_RELEASED)
        groups = set(self.lookup.groups())
        self.wakeups.sweep(groups)
        self.report.sweep(groups)
        self.binds.sweep(groups)

    def _reserve(self, now: float) -> None:
        """Who holds room where (core/reservations.py): one log line per change, the PodGroups
        told (and an Event for each gang that became overdue), and the pods refused for room
        that was let go woken."""
        reserving = self.scheduler.reserving
        made, released = self.scheduler.refresh_reservations(now, time.time())
        for group in made:
            room = reserving.of(group)
            if room is None:
                continue
            self.metrics.holds.inc()
            late = reserving.overdue_of(group)
            log.info(
                "room held",
                group=group,
                domain=str(room.domain),
                nodes=room.nodes,
                estimated_start=rfc3339(room.start) if room.start is not None else None,
                overdue_since=rfc3339(late.since) if late is not None and late.since is not None else None,
                reason="overdue longest" if late is not None else "waited longest for room at its priority",
            )
        for group in released:
            log.info("room released", group=group, reason=self.scheduler.reasons.text(group) or "no longer waiting")
        overdue = reserving.waits.take_overdue()
        for group in overdue:
            self._overdue(group)
        told, reserving.told = reserving.told, set()
        for group in {*made, *released, *told, *overdue, *reserving.waits.take_moved(time.time())}:
            self.report.changed(group)
        if self.scheduler.reserving.take_freed():
            self.wakeups.room_freed()

    def _overdue(self, group: str) -> None:
        """GROUP waited past its maximum wait: one log line and a Warning Event on its PodGroup,
        saying since when and what it holds."""
        late = self.scheduler.reserving.overdue_of(group)
        if late is None:
            return
        self.metrics.overdue.inc()
        room = self.scheduler.reserving.of(group)
        log.warning(
            "gang overdue",
            group=group,
            overdue_since=rfc3339(late.since) if late.since is not None else None,
            max_wait_s=late.limit,
            holds=str(room.domain) if room is not None else None,
            nodes=room.nodes if room is not None else 0,
            reason=late.render(),
        )
        said = late.render() + (f"; {room.render()}" if room is not None else "")
        self.report.emit_group(group, "Overdue", said, "Warning")

    def recover(self) -> None:
        """This replica starts leading: plan the rest of every gang found cut off between two
        binds and give each the bind timeout plus a grace to reach its minimum; gangs that ran
        whole and lost pods since are kept (core/recovery.py)."""
        self.evictions.recover()

    def demote(self) -> None:
        """This replica stopped being the leader: drop every plan, nomination, repair and held
        room at once (the new leader plans again from what the API server shows), fail the
        binds waiting, and cancel every write not sent yet: evictions, wake-ups, nominations,
        Events. A write already on its way is fenced at the client (kube/lease.py)."""
        self.binds.stop_timers()
        self._stop_budget_retry()
        self.scheduler.step_down(Released(R_NOT_LEADER))
        self.binds.demote()
        self.report.clear()
        self.wakeups.clear()
        self.evictions.clear()
        self.tasks.cancel()

    def _stop_budget_retry(self) -> None:
        if self._budget_retry is not None:
            self._budget_retry.cancel()
            self._budget_retry = None

    async def close(self) -> None:
        self._stop_budget_retry()
        self.binds.close()
        await self.tasks.cancel_all()
