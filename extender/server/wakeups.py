"""Wake-ups and nominations: requeue the pods kube-scheduler parked, and steer planned members.

kube-scheduler parks a refused pod in its unschedulable queue, and only some cluster events bring
it back; an update to the pod itself moves it to the active queue at once. So this part patches
members (`Actions.wake`: the plan-generation annotation) when there is something new for them: a
plan made (with nomination on, the same write names each one's planned node), victims gone,
room freed, a queue appeared, or their gang's refusal changed. It remembers the last reason
each pod was refused, which says who is parked and why. Room freed wakes only the gangs parked
for room that it could serve (a member would fit on a node where room came back): a pod ending
anywhere must not re-plan every waiting gang.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import structlog

from extender.core.decisions import FilterResult
from extender.core.decisions_room import BudgetBlocked
from extender.core.scheduler import GangScheduler
from extender.model.keys import GroupKey
from extender.model.pod import PodInfo
from extender.placement import INCOMPLETE, NO_CAPACITY, NO_DOMAIN, Shortfall
from extender.server.actions import Actions
from extender.server.reporting import Reporter, unbound_members
from extender.server.tasks import Tasks

log = structlog.get_logger("topogang")
ROOM_WAKE_DELAY = 1.0  # seconds: node changes come in bursts; members parked for room wake once


def _names(keys: Sequence[str]) -> list[tuple[str, str]]:
    return [(k.namespace, k.name) for k in map(GroupKey.parse, keys)]


class Wakeups:
    def __init__(self, scheduler: GangScheduler, actions: Actions, tasks: Tasks, report: Reporter) -> None:
        self._scheduler = scheduler
        self._lookup = scheduler.lookup
        self.actions = actions
        self._tasks = tasks
        self._report = report
        self.refused: dict[str, str] = {}  # pod -> the last reason it was refused
        self._refreshed: dict[str, str] = {}  # group -> the refusal its parked members were woken to see
        self._wake_soon = False
        self._room_wake: asyncio.TimerHandle | None = None
        self._room_nodes: set[str] = set()  # nodes that came or changed since the last room wake
        self._room_anywhere = False  # room came back where no node is named (held room, devices)
        self._released = 0  # Lookup.nominations_released when last seen
        self._lookup.subscribe(self._changed_object)
        self._lookup.subscribe(self._state_changed)

    # -- after a filter call ---------------------------------------------------------------------

    def filtered(self, pod: PodInfo, result: FilterResult) -> None:
        """What a filter answer changes: members to wake or nominate, who is parked and why."""
        if result.wake:
            self._wake(result.wake, result.group or "")
        if result.steer is not None:  # the pod is sent to (or passed on) this node: nominate it there
            generation = self._scheduler.plans.generation(result.group or "")
            steer = result.steer
            self._tasks.spawn(
                self.actions.nominate([(pod.namespace, pod.name)], generation, lambda *_: steer), "nominate"
            )
        if result.nodes:
            self.refused.pop(pod.key, None)
        elif result.steer is None:
            reason = result.reason
            if self.refused.get(pod.key) != reason:
                self.refused[pod.key] = reason
                if self._report.marks_unschedulable(result.group):
                    self._report.emit(pod, "GangNotScheduled", reason, "Warning")
            if result.event is not None and result.group is not None:
                self._refresh_parked(result.group, reason)

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
        why = self._scheduler.reasons.get(group)
        if isinstance(why, Shortfall) and why.kind == INCOMPLETE:
            return
        stale = [p for p in self._lookup.members(group) if self.refused.get(p, reason) != reason]
        if stale:
            self._wake(stale, group)

    # -- the cluster changed ---------------------------------------------------------------------

    def _changed_object(self, kind: str, key: object) -> None:
        """A victim pod changed or went: wake its gang's members soon if it was the last. A node
        came or changed, or a pod went: wake the members parked for want of room (at most once a
        second)."""
        gave = kind == "pod" and isinstance(key, str) and self._gave_room(key)
        released = self._lookup.nominations_released()
        if kind in ("node", "devices") or gave or released != self._released:
            # A node, device or claim came or changed, a pod went or ended, or a pod another
            # scheduler had nominated stopped waiting for its node (core/nominated.py): there may
            # be room, and kube-scheduler has no event for the gangs refused for want of it.
            if kind == "node" and isinstance(key, str):
                self._room_nodes.add(key)
            elif kind == "devices" or released != self._released:
                self._room_anywhere = True
            self._released = released
            self._room_changed()
            if kind != "pod":
                return
        if (
            kind != "pod"
            or self._wake_soon
            or not isinstance(key, str)
            or not self._scheduler.preempting.is_victim(key)
        ):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._wake_soon = True
        loop.call_soon(self.wake_preempted)

    def wake_preempted(self) -> None:
        """Wake the members of the gangs whose victims have all gone."""
        self._wake_soon = False
        for group in self._scheduler.preempting.take_ready():
            log.info("victims gone", group=group)
            self._report.changed(group)
            self.wake_members(group)

    @property
    def room_wake_pending(self) -> bool:
        """Whether a wake-up of the members parked for room is due (room came back meanwhile)."""
        return self._room_wake is not None

    def _gave_room(self, key: str) -> bool:
        pod = self._lookup.pod(key)
        return pod is None or pod.terminal

    def room_freed(self) -> None:
        """Room a reservation held was let go: kube-scheduler has no event for that."""
        self._room_anywhere = True
        self._room_changed()

    def _room_changed(self) -> None:
        # kube-scheduler requeues its parked pods on a node event, and may retry them before our
        # watch has seen that node: refused again, they would wait for the next event or the
        # 5-minute flush. Once we have seen the node, we requeue them ourselves.
        if self._room_wake is not None or not self.refused:
            return
        with contextlib.suppress(RuntimeError):  # no running loop (a test of the core alone)
            self._room_wake = asyncio.get_running_loop().call_later(ROOM_WAKE_DELAY, self._wake_parked)

    def _wake_parked(self) -> None:
        self._room_wake = None
        nodes, anywhere = self._room_nodes | self._lookup.take_freed(), self._room_anywhere
        self._room_nodes, self._room_anywhere = set(), False
        served: dict[str, bool] = {}  # group -> whether the room that came back could serve it

        def serves(group: str) -> bool:
            if group not in served:
                served[group] = self._wants_room(group) and (anywhere or self._lookup.could_use(group, nodes))
            return served[group]

        short = [p for p in self.refused if (g := self._lookup.group_of(p)) is not None and serves(g)]
        for p in short:
            self.refused.pop(p, None)
        if short:
            self._tasks.spawn(self.actions.wake(_names(short), self._scheduler.plans.next_generation()), "wake")

    def _wants_room(self, group: str) -> bool:
        reason = self._scheduler.reasons.get(group)
        if isinstance(reason, BudgetBlocked):  # room freed may seat it without preempting
            return True
        return isinstance(reason, Shortfall) and reason.kind in (NO_DOMAIN, NO_CAPACITY)

    def _state_changed(self, kind: str, key: object) -> None:
        """A queue appeared or went away: the pods refused for their gang's queue are parked by
        kube-scheduler, and nothing else would requeue them soon."""
        if kind != "queue" or not self.refused:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a test driving the core): nothing parked to wake
        by_group: dict[str, list[str]] = {}
        for pod in self.refused:
            group = self._lookup.group_of(pod)
            if group is not None:
                by_group.setdefault(group, []).append(pod)
        for group, pods in by_group.items():
            self._wake(pods, group)

    # -- the writes ------------------------------------------------------------------------------

    def wake_members(self, group: str) -> None:
        """Requeue every unbound member of GROUP: room is waiting for them."""
        parked = unbound_members(self._lookup, group)
        for p in parked:
            self.refused.pop(p.key, None)
        if parked:
            pods = [(p.namespace, p.name) for p in parked]
            self._tasks.spawn(self.actions.wake(pods, self._scheduler.plans.next_generation()), "wake")

    def _wake(self, pods: Sequence[str], group: str) -> None:
        """Requeue members kube-scheduler parked as unschedulable: an update to the pod itself
        moves it back to the active queue at once (a new pod elsewhere would not). With
        nomination on, every planned member is also nominated on its planned node, in the same
        write, so that its next attempt tries that node first, alone."""
        planned = self._scheduler.reserved(group) if self._scheduler.steering.enabled else {}
        steer = [p for p in pods if p in planned]  # each one's node is asked as its write goes out
        parked = [p for p in pods if p in self.refused and p not in planned]
        for p in [*parked, *steer]:
            self.refused.pop(p, None)
        generation = self._scheduler.plans.generation(group)
        if steer:
            self._tasks.spawn(self.actions.nominate(_names(steer), generation, self._nomination_target), "nominate")
        if parked:
            self._tasks.spawn(self.actions.wake(_names(parked), generation), "wake")

    def _nomination_target(self, namespace: str, name: str) -> str | None:
        """Asked as each nomination goes out: the plan may have traded the pod's node since, or
        kube-scheduler taken it there already (then nothing is written)."""
        return self._scheduler.nomination_target(f"{namespace}/{name}")

    # -- housekeeping ----------------------------------------------------------------------------

    def sweep(self, groups: set[str]) -> None:
        """Forget the pods that are gone and the gangs not in GROUPS."""
        for key in [k for k in self.refused if self._lookup.pod(k) is None]:
            del self.refused[key]
        for group in [g for g in self._refreshed if g not in groups]:
            del self._refreshed[group]

    def clear(self) -> None:
        """This replica stopped leading: nobody is parked with it any more, nothing to wake."""
        self._refreshed.clear()
        self.refused.clear()
        self._wake_soon = False
        self._room_nodes, self._room_anywhere = set(), False
        if self._room_wake is not None:
            self._room_wake.cancel()
            self._room_wake = None
