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

from extender.core.cluster import ClusterState, shortfall
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
MAX_BISECT = 4  # plans spent narrowing the optional pods a refused minimum takes back (after one with all)

Held = Callable[[str, GroupView], BoolArray | None]  # the nodes reservations hold from a gang
HeldAt = Callable[[str, GroupView, float], BoolArray | None]  # the same, at a moment
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
        # group -> (the cluster as it was, the gangs waited for) when its optional pods last left
        # all their room to waiting minimums: asked again unchanged (its next optional pod's call),
        # the answer is the same without planning the minimums again
        self._verdict: dict[str, tuple[tuple[int, int], tuple[str, ...]]] = {}

    def sweep(self, groups: set[str]) -> None:
        """Forget the gangs not in GROUPS (gone)."""
        self._verdict = {g: v for g, v in self._verdict.items() if g in groups}

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
        held_at: HeldAt,
        now: float,
    ) -> tuple[PlanResult, First]:
        """Plan GROUP's GANG with minimums first (ASSUMED: the pods its plan holds already, when the
        plan is extended; None for a new plan): a new plan refused for room is given the room of
        other gangs' reserved optional pods, and the optional pods it places leave the room of the
        minimums waiting. HELD: the nodes reservations hold from GROUP; HELD_AT: from a gang at NOW."""
        result = plan(snapshot_for(self._state, self._membership, group, gang, held), gang)
        given: dict[str, list[str]] = {}
        if isinstance(result, Unplaceable) and assumed is None and result.reason.kind in (NO_DOMAIN, NO_CAPACITY):
            given = self.give_back(group, priority, gang, held)
            if given:
                result = plan(snapshot_for(self._state, self._membership, group, gang, held), gang)
        counts = {g: len(pods) for g, pods in given.items()}
        if isinstance(result, Unplaceable):
            return result, First(given_back=counts)

        def held_for(key: str, view: GroupView) -> BoolArray | None:
            return held_at(key, view, now)

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
        minimum = {p: n for p, n in result.assignments.items() if p in result.minimum}
        now = (self._state.version, self._state.reserved_version)
        verdict = self._verdict.pop(group, None)
        if assumed and verdict is not None and verdict[0] == now:  # nothing changed since they all waited
            self._verdict[group] = verdict
            unplaced = tuple(result.unplaced) + tuple(sorted(extras))
            levels = result.levels if minimum else {}
            stands = replace(result, assignments=minimum, unplaced=unplaced, levels=levels)
            return Yielded(stands, len(extras), verdict[1])
        rivals = self.waiting(group, priority)
        if not rivals:
            return None
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
        if not kept:  # as the cluster will be once the plan's minimum is reserved (a reservation a pod)
            held_then = (self._state.version, self._state.reserved_version + len(minimum))
            self._verdict[group] = (held_then, tuple(planned_around))
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
        -> its pods let go; empty when letting them all go would not make it fit). The cheapest
        first (lowest priority, newest plan): the shortest such prefix that lets the minimum fit
        is found by bisection, and of it only what the nodes of that plan need goes."""
        units = self._optional_units(group, priority)
        if not units:
            return {}

        def attempt(k: int) -> Plan | None:
            freed = self._room((p, n) for _, pods in units[:k] for p, n in pods)
            found = plan(snapshot_for(self._state, self._membership, group, gang, held, give_back=freed), gang)
            return found if isinstance(found, Plan) else None

        lo, hi = 0, len(units)  # the minimum does not fit with none given back; does it with all?
        found = attempt(hi)
        for _ in range(MAX_BISECT):
            if found is None or hi - lo <= 1:
                break
            mid = (lo + hi) // 2
            if (fewer := attempt(mid)) is not None:
                hi, found = mid, fewer
            else:
                lo = mid
        if found is None:
            return {}
        need = self._room((p, n) for p, n in found.assignments.items() if p in found.minimum)
        out: dict[str, list[str]] = {}
        for other, pods in units[:hi]:
            nodes = {n for _, n in pods}
            if not any(self._short(node, need[node]) for node in nodes if node in need):
                continue  # its room is not where the minimum goes, or not needed there
            gp = self._plans[other]
            for pod, _ in pods:
                self._plans.let_go(gp, pod)
                out.setdefault(other, []).append(pod)
        for other, gone in out.items():  # each gang that lost some is told why its pods wait
            kept = self._plans.reserved(other)
            pending = [k for k in self._membership.view(other).pods if k not in kept and self._unbound(k)]
            self._reasons.record(other, BeyondMinimum(max(len(pending), len(gone)), (group,)))
        return out

    def _optional_units(self, group: str, priority: int) -> list[tuple[str, list[tuple[str, str]]]]:
        """The reserved optional pods of other plans of at most PRIORITY not on their way to bind,
        as units that go together ((group, [(pod, node)])): a segment's pods (a leaf with a
        required level and none of the minimum), else one pod; the cheapest first."""
        found: list[tuple[int, int, str, list[tuple[str, str]]]] = []
        for other in self._plans:
            gp = self._plans[other]
            view = self._membership.view(other)
            if other == group or gp.gate.ahead or view.priority > priority:
                continue
            free = {p: n for p, n in gp.reserved.items() if p not in gp.gate.minimum and not gp.gate.fixed(p)}
            if not free:
                continue
            whole: dict[str, list[tuple[str, str]]] = {}
            gang = view.built.gang if view.built is not None else None
            for scope in gang.scopes if gang is not None else ():
                keys = [m.key for m in scope.members]
                segment = scope.rule is not None and scope.rule.required is not None
                if segment and keys and not any(k in gp.gate.minimum for k in keys):
                    whole[scope.key] = [(k, free[k]) for k in keys if k in free]
                    if len(whole[scope.key]) < len([k for k in keys if k in gp.reserved]):
                        del whole[scope.key]  # part of it is on its way to bind: none of it goes
            alone = {p for pods in whole.values() for p, _ in pods}
            units = [*whole.values(), *([(p, n)] for p, n in free.items() if p not in alone)]
            # the last placed first (the plan places optional pods in the order they come)
            found += [(view.priority, -gp.generation, other, pods) for pods in reversed(units) if pods]
        found.sort(key=lambda u: (u[0], u[1]))  # stable: within a plan, the order above
        return [(other, pods) for _, _, other, pods in found]

    def _short(self, node: str, wanted: Counter[str]) -> bool:
        """Whether NODE lacks room for WANTED as the cluster is."""
        return shortfall(self._state, node, wanted) is not None

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
