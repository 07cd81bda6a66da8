"""Minimums first: the pods beyond a gang's minimum take only room that no waiting minimum needs.

KAI-Scheduler orders every gang below its minimum ahead of any gang's optional pods (its elastic
plugin) and grows a gang that has its minimum one child at a time. topogang plans a whole gang
per call, so the same order is kept where a plan is made, in both modes and in the simulator:

  waiting      the minimums that wait for room: every whole, valid gang with no plan, no pod
               bound and nothing else under way (a preemption, a repair, its queue), of at least
               the priority asked about, in kube-scheduler's queue order (priority, then age).
  yield_extras a plan that places optional pods (beyond its gang's minimum) is checked against
               them: each is planned in turn as if the plan's minimum, and the minimums before
               it, were reserved. When the optional pods leave room for every one that fits so,
               the plan stands; otherwise they are placed again around that room, and those that
               no longer fit wait (their pods ask again).
  give_back    a minimum refused for room is given the room that other plans hold for optional
               pods not on their way to bind yet (not at the bind gate, not being bound, not
               released to kube-scheduler in gates mode) of gangs of at most its priority: on each
               node its plan takes, the fewest such reservations, lowest priority first.

Optional pods already bound are given back by preemption: for a minimum of equal or higher
priority they are the first victims (placement/victim_search.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from extender.core.cluster import ClusterState
from extender.core.decisions import BeyondMinimum
from extender.core.exclusivity import snapshot_for
from extender.core.membership import GroupView, Membership
from extender.core.plans import Plans
from extender.core.preempting import Preempting
from extender.core.reasons import Reasons
from extender.core.repairing import Repairs
from extender.core.status import queue_of
from extender.placement import (
    NO_CAPACITY,
    NO_DOMAIN,
    BoolArray,
    Domain,
    Gang,
    Plan,
    PlanResult,
    Unplaceable,
    incomplete,
    plan,
)

# At most this many waiting minimums are planned to decide where one gang's optional pods may go:
# the first in queue order, the ones that would start first (a bound on the cost of a plan).
MAX_WAITING = 16

Held = Callable[[str, GroupView], BoolArray | None]  # the nodes reservations hold from a gang
Room = dict[str, Counter[str]]  # node -> requests


@dataclass(frozen=True)
class Yielded:
    """What a plan's optional pods left for waiting minimums."""

    plan: Plan  # the plan as it stands: the minimum, and the optional pods that still fit
    pods: int  # optional pods that no longer fit around the waiting minimums
    waiting: tuple[str, ...]  # the gangs whose minimums were planned around


@dataclass(frozen=True)
class First:
    """What minimums first changed in one plan (for its PlanEvent and its reason)."""

    yielded: int = 0  # the gang's optional pods left unplaced for waiting minimums...
    waiting: tuple[str, ...] = ()  # ...of these gangs
    given_back: Mapping[str, int] = field(default_factory=dict)  # gang -> optional pods that gave their room


class Minimums:
    def __init__(
        self,
        state: ClusterState,
        membership: Membership,
        plans: Plans,
        reasons: Reasons,
        preempting: Preempting,
        repairs: Repairs,
    ) -> None:
        self._state = state
        self._membership = membership
        self._plans = plans
        self._reasons = reasons
        self._preempting = preempting
        self._repairs = repairs

    def busy(self, group: str) -> bool:
        """Whether GROUP has a preemption or a repair under way (it waits for those, not for room)."""
        return self._preempting.nomination(group) is not None or group in self._repairs.underway

    def place(
        self,
        group: str,
        priority: int,
        gang: Gang,
        held: BoolArray | None,
        assumed: Mapping[str, str] | None,
        held_for: Held,
    ) -> tuple[PlanResult, First]:
        """Plan GROUP's GANG with minimums first (ASSUMED: the pods its plan holds already, when the
        plan is extended; None for a new plan): a new plan refused for room is given the room of
        other gangs' reserved optional pods, and the optional pods it places leave the room of the
        minimums waiting."""
        result = plan(snapshot_for(self._state, self._membership, group, gang, held), gang)
        given: dict[str, list[str]] = {}
        if isinstance(result, Unplaceable) and assumed is None and result.reason.kind in (NO_DOMAIN, NO_CAPACITY):
            given = self.give_back(group, priority, gang, held)
            if given:
                result = plan(snapshot_for(self._state, self._membership, group, gang, held), gang)
        counts = {g: len(pods) for g, pods in given.items()}
        if isinstance(result, Unplaceable):
            return result, First(given_back=counts)
        yielded = self.yield_extras(group, priority, result, assumed or {}, held_for, held)
        if yielded is None:
            return result, First(given_back=counts)
        return yielded.plan, First(yielded.pods, yielded.waiting if yielded.pods else (), counts)

    def waiting(self, group: str, priority: int) -> list[tuple[str, GroupView, Gang]]:
        """The gangs other than GROUP whose minimums wait for room, of PRIORITY or higher, in queue order."""
        found = []
        for other in self._membership.groups():
            if other == group or other in self._plans or self.busy(other):
                continue
            view = self._membership.view(other)
            if view.priority < priority or view.waiting or not view.valid or view.built is None:
                continue
            gang = view.built.gang
            if gang is None or incomplete(gang) is not None or queue_of(self._state, view)[0] is not None:
                continue
            if any(m.node is not None for m in gang.members()):
                continue  # it runs (or part of it does: a repair's, not room's, to mend)
            found.append((other, view, gang))
        found.sort(key=lambda t: (-t[1].priority, t[1].created if t[1].created is not None else 0.0, t[0]))
        return found[:MAX_WAITING]

    def yield_extras(
        self, group: str, priority: int, result: Plan, assumed: Mapping[str, str], held: Held, own: BoolArray | None
    ) -> Yielded | None:
        """RESULT, GROUP's plan, with its optional pods kept off the room of the minimums waiting
        (None: they take none of it). ASSUMED: GROUP's pods its plan holds already (an extension);
        OWN: the nodes reservations hold from GROUP."""
        extras = {p: n for p, n in result.assignments.items() if p not in result.minimum}
        if not extras:
            return None
        rivals = self.waiting(group, priority)
        if not rivals:
            return None
        minimum = {p: n for p, n in result.assignments.items() if p in result.minimum}
        taken = self._room(minimum.items())
        planned_around = []
        for key, view, gang in rivals:
            found = plan(snapshot_for(self._state, self._membership, key, gang, held(key, view), taken=taken), gang)
            if isinstance(found, Plan):
                _add(taken, self._room((p, n) for p, n in found.assignments.items() if p in found.minimum))
                planned_around.append(key)
        if not planned_around or self._fits(extras, taken):
            return None
        view = self._membership.view(group, assumed={**assumed, **minimum})
        mine = view.built.gang if view.built is not None else None
        again = None
        if mine is not None:
            again = plan(snapshot_for(self._state, self._membership, group, mine, own, taken=taken), mine)
        kept = again.assignments if isinstance(again, Plan) else {}
        nodes = {**minimum, **kept}
        domains = {**result.domains, **(again.domains if isinstance(again, Plan) else {})}
        left = tuple(sorted(set(extras) - set(kept)))
        stands = replace(
            result,
            assignments=nodes,
            domains=domains,
            unplaced=tuple(result.unplaced) + left,
            levels=self._levels(mine, nodes.values()) if mine is not None else result.levels,
        )
        return Yielded(stands, len(extras) - len(kept), tuple(planned_around))

    def give_back(self, group: str, priority: int, gang: Gang, held: BoolArray | None) -> dict[str, list[str]]:
        """Let go of the reservations of optional pods that keep GROUP's minimum from fitting (group
        -> its pods let go; empty when letting them all go would not make it fit)."""
        mine: dict[str, tuple[str, str, int]] = {}  # pod -> (its group, node, its gang's priority)
        for other in self._plans:
            gp = self._plans[other]
            if other == group or gp.gate.ahead:
                continue
            rank = self._membership.view(other).priority
            if rank > priority:
                continue
            for pod, node in gp.reserved.items():
                if pod not in gp.gate.minimum and not gp.gate.fixed(pod):
                    mine[pod] = (other, node, rank)
        if not mine:
            return {}
        freed = self._room((p, n) for p, (_, n, _) in mine.items())
        found = plan(snapshot_for(self._state, self._membership, group, gang, held, give_back=freed), gang)
        if not isinstance(found, Plan):
            return {}
        need = self._room((p, n) for p, n in found.assignments.items() if p in found.minimum)
        out: dict[str, list[str]] = {}
        for node, wanted in need.items():
            free = Counter({r: self._state.free_on(node, r) for r in wanted})
            here = sorted((p for p, (_, n, _) in mine.items() if n == node), key=lambda p: (mine[p][2], p))
            for pod in here:
                if all(free[r] >= v for r, v in wanted.items()):
                    break
                other = mine[pod][0]
                self._plans.let_go(self._plans[other], pod)
                free.update(self._state.pods[pod].requests)
                out.setdefault(other, []).append(pod)
        for other, pods in out.items():  # each gang that lost some is told why its pods wait
            kept = self._plans.reserved(other)
            pending = [k for k in self._membership.view(other).pods if k not in kept and self._unbound(k)]
            self._reasons.record(other, BeyondMinimum(max(len(pending), len(pods)), (group,)))
        return out

    # -- helpers -------------------------------------------------------------------------------

    def _unbound(self, pod: str) -> bool:
        info = self._state.pods.get(pod)
        return info is not None and info.node_name is None

    def _room(self, placed: Iterable[tuple[str, str]]) -> Room:
        out: Room = {}
        for pod, node in placed:
            info = self._state.pods.get(pod)
            if info is not None:
                out.setdefault(node, Counter()).update(info.requests)
        return out

    def _fits(self, extras: Mapping[str, str], taken: Room) -> bool:
        """Whether EXTRAS fit where they were planned beside the TAKEN room (then nobody needs theirs)."""
        want = self._room(extras.items())
        for node, room in want.items():
            besides = taken.get(node, Counter())
            if any(self._state.free_on(node, r) - besides[r] < v for r, v in room.items()):
                return False
        return True

    def _levels(self, gang: Gang, nodes: Iterable[str]) -> dict[str, tuple[str, ...]]:
        """Level -> the domains NODES use (a plan's `levels`)."""
        table = self._state.table
        tree = table.tree(gang.topology)
        index = [table.index[n] for n in nodes if n in table.index]
        out: dict[str, tuple[str, ...]] = {}
        for level in range(1, tree.node_level):
            used = {int(tree.levels[level].domain_of_node[i]) for i in index}
            out[tree.level_name(level)] = tuple(sorted(tree.path(Domain(level, d)) for d in used))
        return out


def _add(into: Room, room: Room) -> None:
    for node, requests in room.items():
        into.setdefault(node, Counter()).update(requests)
