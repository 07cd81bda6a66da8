"""The bind verb at the gang's gate: the calls that wait, the Bindings posted, the gate's timers.

A bind call for a member of the minimum waits (a future per call) until the whole minimum has
reached bind; then every arrived member is bound at once, concurrently, whether its call is still
waiting or was already answered. Each gang's gate has a silence timer (armed for the bind timeout
at the first arrival; when it fires it is re-armed for what is left since the last new arrival,
else the gate closes) and each call a budget (under kube-scheduler's httpTimeout): past it the
call is answered with a retryable error while the pod stays arrived. When the core drops a plan,
the calls waiting at its gate fail (`fail_dropped`), so kube-scheduler un-reserves them.

A gate's batch is bound in a task of its own, and the Binding POSTs are futures shared by every
call about their pod: no caller's cancellation (a dropped HTTP/2 connection cancels its streams'
handlers) reaches them, so the batch's Bindings and the answers to its other calls never depend
on the one caller that went away.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Coroutine, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar

import structlog

from extender.core.decisions import BIND, DONE, REJECT, WAIT, BindDecision
from extender.core.scheduler import GangScheduler
from extender.model.keys import GroupKey
from extender.server import wire
from extender.server.actions import Actions
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
from extender.server.reporting import Reporter

log = structlog.get_logger("topogang")
T = TypeVar("T")

# API statuses after which no retry can bind the pod: it is gone (404), or its namespace is being
# deleted (403 "being terminated"); its reservation is dropped instead of held for a retry.
BIND_HOPELESS = frozenset({403, 404})


class BindCalls:
    def __init__(
        self,
        scheduler: GangScheduler,
        actions: Actions,
        report: Reporter,
        metrics: Metrics,
        *,
        bind_timeout: float,
        call_budget: float,
    ) -> None:
        self.scheduler = scheduler
        self._lookup = scheduler.lookup
        self.actions = actions
        self._report = report
        self.metrics = metrics
        self.bind_timeout = bind_timeout  # silence: no new member at the gate this long closes it
        self.call_budget = call_budget  # the longest one bind call waits (under kube-scheduler's httpTimeout)
        self._first_seen: dict[str, float] = {}  # group -> when a member was first filtered (monotonic)
        self._waiting: dict[str, asyncio.Future[str]] = {}  # pod -> its bind's answer
        self._binding: dict[str, asyncio.Future[str]] = {}  # pod -> its Binding POST in flight
        self._gates: dict[str, asyncio.TimerHandle] = {}  # group -> its gate's silence timer
        # Batches and Binding POSTs under way: the loop keeps only weak references to tasks, and
        # a caller that went away no longer holds its own.
        self._running: set[asyncio.Task[object]] = set()

    async def bind(self, args: wire.BindArgs) -> bytes:
        key = args.pod_key
        cached = self._lookup.pod(key)
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
            errors = await asyncio.shield(self._keep(self._bind_all(decision.bind, caller=key)))
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
        self._report.decision(decision.event, 0.0)
        self.fail_dropped(BIND_PLAN_RELEASED)
        self._report.changed(group)
        message = f"{decision.error.removeprefix('topogang: ')}: {decision.event.outcome}"
        self._report.emit_group(group, "GangReplanned", message, "Warning")

    async def _wait(self, key: str, node: str) -> str:
        """Hold this bind call at its gang's gate for at most the call budget. Past it the call is
        answered with a retryable error while the pod stays arrived (its node and reservation
        kept): kube-scheduler requeues it, and the gate binds it with the rest either way."""
        group = self._lookup.group_of(key) or ""
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

    def ahead(self, batch: Sequence[tuple[str, str]]) -> Awaitable[None]:
        """Bind a gang planned just now, all of it, without waiting for its members' calls
        (binding.BindGate.ahead). Each Binding is registered before this returns, so a member's
        call that comes meanwhile shares it; a pod whose Binding failed is woken (and nominated on
        its planned node), for kube-scheduler to bring it there and bind it through its own call."""
        posts = self._start(batch)

        async def run() -> None:
            errors = await self._bind_all(batch, posts, ahead=True)
            failed = [GroupKey.parse(p) for p in errors if self._lookup.pod(p) is not None]
            if not failed:
                return
            names, generation = [(k.namespace, k.name) for k in failed], self.scheduler.plans.next_generation()
            if self.scheduler.steering.enabled:  # requeued and sent to its planned node in one write
                await self.actions.nominate(names, generation, self._planned_node)
            else:
                await self.actions.wake(names, generation)

        return run()

    def _planned_node(self, namespace: str, name: str) -> str | None:
        return self.scheduler.nomination_target(f"{namespace}/{name}")

    def _keep(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """WORK in a task held until it ends (a caller that goes away does not take it along)."""
        task = asyncio.get_running_loop().create_task(work)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return task

    def _start(self, batch: Sequence[tuple[str, str]], caller: str | None = None) -> list[asyncio.Future[str]]:
        """Start the Binding POST of each (pod, node), registered at once in `_binding`; CALLER:
        the pod whose bind call asked for them (None: bound ahead)."""
        loop = asyncio.get_running_loop()
        posts = []
        for pod, node in batch:
            future: asyncio.Future[str] = loop.create_future()
            self._binding[pod] = future
            task = self._keep(self._post_binding(pod, node, caller))
            task.add_done_callback(partial(self._posted, pod, future))
            posts.append(future)
        return posts

    def _posted(self, pod: str, future: asyncio.Future[str], task: asyncio.Task[str]) -> None:
        if self._binding.get(pod) is future:
            del self._binding[pod]
        if future.done():  # (no caller can cancel it; should it be done anyway, nothing is left to say)
            return
        if task.cancelled():
            future.cancel()  # shutting down: whoever shares it is cancelled too
        elif (exc := task.exception()) is not None:
            future.set_exception(exc)
        else:
            future.set_result(task.result())

    async def _bind_all(
        self,
        batch: Sequence[tuple[str, str]],
        posts: Sequence[asyncio.Future[str]] | None = None,
        ahead: bool = False,
        caller: str | None = None,
    ) -> dict[str, str]:
        """Bind every pod of a released gate at once (POSTS: their Bindings started already);
        answer the calls that were waiting."""
        groups = {g for p, _ in batch if (g := self._lookup.group_of(p))}
        for group in groups:
            timer = self._gates.pop(group, None)
            if timer is not None:
                timer.cancel()
        start = time.perf_counter()
        posts = posts if posts is not None else self._start(batch, caller)
        if posts:  # (wait, not gather: should this be cancelled, shared Bindings must not be)
            await asyncio.wait(posts)
        results = [post.result() for post in posts]
        errors = {p: e for (p, _), e in zip(batch, results, strict=True) if e}
        for (pod, _), error in zip(batch, results, strict=True):
            waiter = self._waiting.pop(pod, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(error)
        now = time.monotonic()
        for group in groups:
            first = self._first_seen.pop(group, None)
            if first is not None and not any(self._lookup.group_of(p) == group for p in errors):
                self.metrics.gang_wait.observe(now - first)  # the gate opened: the whole minimum is bound
            self._report.changed(group)
        if len(batch) > 1 or groups:
            log.info(
                "bound",
                group=sorted(groups)[0] if len(groups) == 1 else sorted(groups),
                pods=len(batch),
                failed=len(errors),
                nodes=sorted({n for _, n in batch}),
                bind_ms=round((time.perf_counter() - start) * 1000, 1),
                ahead=ahead,
                **({"errors": dict(list(errors.items())[:5])} if errors else {}),
            )
        return errors

    def _bound_to(self, pod_key: str, node: str) -> bool:
        pod = self._lookup.pod(pod_key)
        return pod is not None and pod.node_name == node

    async def _post_binding(self, pod_key: str, node: str, caller: str | None) -> str:
        pod = self._lookup.pod(pod_key)
        if pod is None:
            self.metrics.bind_failed(BIND_POD_GONE)
            return "topogang: the pod no longer exists"
        try:
            await self.actions.bind(pod.namespace, pod.name, pod.uid, node)
        except Exception as exc:  # an API error: this pod's call fails, kube-scheduler retries it
            self.metrics.bind_failed(BIND_API_ERROR)
            self.scheduler.gates.plain_bound(pod_key)  # a plain pod's room reserved for the bind goes
            if getattr(exc, "status", None) in BIND_HOPELESS:
                self.scheduler.forget_pod(pod_key)  # no retry can bind it: its room goes back
            return f"topogang: binding {pod_key} to {node} failed: {exc}"
        # kube-scheduler holds a pod assumed in its cache while the pod's bind call waits for the
        # answer (the caller's, or one waiting at the gate). Any other pod topogang bound is not
        # in that cache until its informer sees the binding: meanwhile the node is checked for
        # plain pods (core/posted.py).
        assumed = pod_key == caller or pod_key in self._waiting
        self.scheduler.observe_pod(replace(pod, node_name=node), posted=not assumed)
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
            self._report.changed(group)
            log.warning(
                "bind gate timed out",
                group=group,
                arrived=len(waiting),
                missing=missing[:10],
                reason=self.scheduler.reasons.text(group),
            )
        self.fail_dropped(BIND_GATE_TIMEOUT)

    def fail_dropped(self, why: str) -> None:
        """Answer the bind calls waiting at gates the core closed; WHY is the metric's reason."""
        for pod, reason in self.scheduler.gates.take_dropped():
            waiter = self._waiting.pop(pod, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(f"topogang: {reason.render()}")
                self.metrics.bind_failed(why)

    def seen(self, group: str) -> None:
        """A member of GROUP was first refused or planned now: the gang's wait starts."""
        if group not in self._first_seen:
            self._first_seen[group] = time.monotonic()

    # -- housekeeping ----------------------------------------------------------------------------

    def sweep(self, groups: set[str]) -> None:
        """Forget the gangs not in GROUPS (gone)."""
        for group in [g for g in self._first_seen if g not in groups]:
            del self._first_seen[group]

    def demote(self) -> None:
        """This replica stopped leading (the core dropped every plan): fail every waiting call."""
        self.fail_dropped(BIND_NOT_LEADER)
        self._fail_waiting("topogang: this replica is no longer the leader", BIND_NOT_LEADER)
        self._waiting.clear()
        self._first_seen.clear()

    def close(self) -> None:
        """Shutting down: fail every waiting call."""
        self.stop_timers()
        self._fail_waiting("topogang: shutting down", BIND_SHUTDOWN)

    def stop_timers(self) -> None:
        for timer in self._gates.values():
            timer.cancel()
        self._gates.clear()

    def _fail_waiting(self, answer: str, why: str) -> None:
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_result(answer)
                self.metrics.bind_failed(why)
