"""Evictions, through the Eviction API (so PodDisruptionBudgets apply), and what they are for.

  preemption  a gang's victims (or the pods moved for it: defragmentation), once its plan is
              made: those a PodDisruptionBudget covers first, the others once they are gone;
              one a budget refuses is tried again every EVICT_RETRY seconds while the room is
              held for the gang
  repair      the running pods of a gang's part that moves whole
  unrepairable  a gang no repair mended in time, when its workload asks to be evicted whole
  recovery    a gang found cut off between two binds when this replica started leading and
              not completed within the bind timeout plus the grace: its bound pods (a gang
              that ran whole and lost pods since is kept: core/recovery.py)

Each says so with Events and one log line; the decisions are the core's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import structlog

from extender.core.decisions import PlanEvent
from extender.core.recovery import Recovery
from extender.core.scheduler import GangScheduler
from extender.kube.moved import MOVED
from extender.model.pod import PodInfo
from extender.server.actions import BLOCKED, Actions
from extender.server.metrics import Metrics
from extender.server.reporting import Reporter
from extender.server.tasks import Tasks

log = structlog.get_logger("topogang")
EVICT_RETRY = 2.0  # seconds between evictions a PodDisruptionBudget refused


class Evictions:
    def __init__(
        self,
        scheduler: GangScheduler,
        actions: Actions,
        tasks: Tasks,
        report: Reporter,
        metrics: Metrics,
        *,
        recovery_within: float,
    ) -> None:
        self.scheduler = scheduler
        self._lookup = scheduler.lookup
        self.actions = actions
        self._tasks = tasks
        self._report = report
        self.metrics = metrics
        self.recovery = Recovery(recovery_within)  # gangs found part-bound at start

    def decided(self, event: PlanEvent) -> None:
        """A decision that evicts: a preemption plan or a repair."""
        if event.preemption is not None:
            self._preempting(event)
        if event.repair is not None:
            self._repairing(event)

    def _preempting(self, event: PlanEvent) -> None:
        """A gang's preemption plan was made: evict its victims, say so on them and on the gang."""
        p = event.preemption
        assert p is not None
        victims = [pod for key in p.pods if (pod := self._lookup.pod(key)) is not None]
        if p.moves:  # defragmentation: the pods move, each to room held for its replacement
            self.metrics.defragmentations.inc()
            self.metrics.pods_moved.inc(len(p.pods))
            for pod in victims:
                where = f"node {p.moves[pod.key]}" if pod.key in p.moves else "room held elsewhere"
                text = f"Moved out of {p.domain} so that {event.group} fits there; its replacement goes to {where}"
                self._report.emit(pod, MOVED, text, "Normal", with_controller=True)
            self._report.emit_group(event.group, "Defragmenting", event.reason, "Normal")
            self._report.emit_unbound(event.group, "Defragmenting", event.reason)
        else:
            self.metrics.preemptions.inc()
            self.metrics.preemption_victims.inc(len(p.pods))
            for pod in victims:
                self._report.emit(pod, "Preempted", f"Preempted by {event.group} for {p.domain}", "Normal")
            self._report.emit_unbound(event.group, "Preempting", event.reason)
        covered = set(p.guarded)
        first, rest = [v for v in victims if v.key in covered], [v for v in victims if v.key not in covered]
        self._tasks.spawn(
            self._evict_in_turn(event.group, first, rest, self._nominated_victim(event.group)), "eviction"
        )

    async def _evict_in_turn(
        self, group: str, first: Sequence[PodInfo], rest: Sequence[PodInfo], wanted: Callable[[str], bool]
    ) -> None:
        """The victims a PodDisruptionBudget covers go first, the others once those are evicted:
        should a budget refuse one until the room is released (the search read an allowance
        that another eviction spent since), nobody else was evicted for nothing."""
        await self._evict_all(group, first, wanted)
        left = [p for p in rest if wanted(p.key)]
        if left:
            await self._evict_all(group, left, wanted)

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
        moved = [pod for key in r.moved if (pod := self._lookup.pod(key)) is not None]
        for pod in moved:
            self._report.emit(pod, "GangRepair", f"Evicted so that {event.group} can {r.describe()}", "Normal")
        self._report.emit_group(event.group, "GangRepair", r.describe(), "Warning")
        repairs = self.scheduler.repairs
        self._tasks.spawn(
            self._evict_all(event.group, moved, lambda key: repairs.pending(event.group, key)), "eviction"
        )

    def expire_repairs(self, now: float) -> None:
        """Gangs no repair mended in time: say so; evict those that ask for it, whole."""
        for group, pods in self.scheduler.expire_repairs(now):
            why = self.scheduler.reasons.text(group)
            self.metrics.unrepairable.inc()
            log.warning("gang could not be repaired", group=group, evicting=[p.key for p in pods][:20], reason=why)
            self._report.emit_group(group, "Unrepairable", why, "Warning")
            if pods:
                self._tasks.spawn(self._evict_all(group, pods, lambda _: False), "eviction")
            self._report.changed(group)

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

    def clear(self) -> None:
        """This replica stopped leading: no recovery deadline runs (evictions in flight are the
        extender's tasks, cancelled with the rest)."""
        self.recovery.deadlines.clear()

    def recover(self) -> None:
        """This replica starts leading: plan the rest of every gang found cut off between two
        binds (a crash) and give each the bind timeout plus a grace to reach its minimum."""
        found = self.recovery.start(self.scheduler, time.monotonic())
        for event in found.events:
            self._report.decision(event, 0.0)
            self._report.changed(event.group)
        if self.recovery.deadlines:
            log.warning(
                "gangs found cut off between two binds",
                groups=sorted(self.recovery.deadlines)[:20],
                count=len(self.recovery.deadlines),
                within_s=self.recovery.within,
                reason="bound members, the rest created before them and never bound: finished in time or evicted",
            )
        if found.degraded:
            log.info(
                "gangs found running below their minimum kept",
                groups=sorted(found.degraded)[:20],
                count=len(found.degraded),
                reason="they ran whole and lost pods since: repaired as under one leader; on-unrepairable applies",
            )

    def evict_overdue(self) -> None:
        """Part-bound gangs that did not reach their minimum in time: evict what was bound, so no
        gang runs below its minimum; the PodGroup status and an Event say why."""
        for group, bound in self.recovery.overdue(self.scheduler, time.monotonic()).items():
            why = self.scheduler.reasons.text(group)
            log.warning("evicting a gang left below its minimum", group=group, pods=bound[:20], reason=why)
            pods = [pod for key in bound if (pod := self._lookup.pod(key)) is not None]
            self._tasks.spawn(self._evict_below_minimum(group, pods), "eviction")
            self._report.emit_group(group, "PartialGangEvicted", why, "Warning")
            self._report.changed(group)

    async def _evict_below_minimum(self, group: str, pods: Sequence[PodInfo]) -> None:
        outcomes = await asyncio.gather(
            *(self.actions.evict(p.namespace, p.name, p.uid) for p in pods), return_exceptions=True
        )
        for pod, outcome in zip(pods, outcomes, strict=True):
            if isinstance(outcome, BaseException) or outcome == BLOCKED:
                why = str(outcome) if isinstance(outcome, BaseException) else "a PodDisruptionBudget refused it"
                log.warning("could not evict a pod of a gang below its minimum", group=group, pod=pod.key, error=why)
