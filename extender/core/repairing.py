"""Repairs: a running gang lost a pod and its replacement finds no room where the gang runs.

find      search a repair (placement.repair): the smallest scope with a required constraint
          around the replacement that can move whole inside the domains the rest holds.
start     the repair's new room is reserved for the gang at once (so no one takes it while the
          moved pods leave), and the moved scope's running pods are the caller's to evict.
gone      a pod left; the repair then waits for the gang to be whole again (the workload
          controller recreates what was evicted).
settle    the gang is whole: the held room is given back just before the gang is planned for
          real, into that room.
broken    no repair was found: when the gang was first found so. Past the repair timeout the
          gang is given up (its status says so and, when it asks for it, it is evicted whole).

Synchronous and clock-free like the rest of the core: callers pass `now`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from extender.core.cluster import ClusterState
from extender.core.decisions import R_FOLLOWERS_MISSING, R_REPAIRING, Reason, Repairing, Unrepairable
from extender.core.evicted import REPAIRED, UNREPAIRABLE, Evicted, eviction
from extender.core.membership import Membership
from extender.core.nominated import nominated_room
from extender.core.reasons import Reasons
from extender.model.labels import ON_UNREPAIRABLE
from extender.model.pod import PodInfo
from extender.placement import ClusterSnapshot, Gang, Repair, plan_repair

EVICT_GANG, KEEP = "EvictGang", "Keep"


def unrepairable_policy(
    pods: list[PodInfo], group: Mapping[str, str] | None = None, *, whole_only: bool = False
) -> tuple[bool, str]:
    """(evict the gang whole?, a complaint about the annotation's value, or ""); GROUP: the
    annotations of the group object, which may carry it too; WHOLE_ONLY: its disruptionMode is
    all, which evicts it whole unless the annotation says Keep (extender.core.disruption)."""
    values = {p.annotations[ON_UNREPAIRABLE] for p in pods if ON_UNREPAIRABLE in p.annotations}
    if group is not None and ON_UNREPAIRABLE in group:
        values.add(group[ON_UNREPAIRABLE])
    bad = sorted(v for v in values if v not in (EVICT_GANG, KEEP))
    if bad:
        return False, f"annotation {ON_UNREPAIRABLE}: {bad[0]!r} is not {EVICT_GANG} or {KEEP}; kept running"
    if whole_only and KEEP not in values:
        return True, ""
    return EVICT_GANG in values, ""


@dataclass
class Underway:
    repair: Repair
    started: float
    pending: set[str]  # moved pods not gone yet
    held: dict[str, str] = field(default_factory=dict)  # pod -> node reserved for the gang


@dataclass(frozen=True)
class LastRepair:
    """The last repair of a gang, for its status and `explain`."""

    message: str
    at: float  # when it started (the caller's clock)


class Repairs:
    def __init__(
        self, state: ClusterState, membership: Membership, *, timeout: float, evicted: Evicted | None = None
    ) -> None:
        """EVICTED: where the pods each repair moves, and gangs evicted whole, are remembered."""
        self.state = state
        self.membership = membership
        self.evicted = evicted if evicted is not None else Evicted()
        self.timeout = timeout  # a broken gang no repair mends is given up after this long
        self.underway: dict[str, Underway] = {}
        self.broken: dict[str, float] = {}  # group -> when no repair was first found for it
        self.last: dict[str, LastRepair] = {}
        self.recorded: dict[str, str] = {}  # group -> the last repair its PodGroup's status tells of
        self._moved: dict[str, str] = {}  # moved pod -> its group
        self._tried: dict[str, int] = {}  # group -> the state version a search found nothing in

    def find(self, group: str, gang: Gang, now: float, *, whole_only: bool = False) -> Repair | None:
        """A repair for GROUP, whose unbound pods do not fit where the gang runs; None when
        nothing runs (a first placement, not a repair) or no part of the gang can move. The room
        of pods other schedulers nominated (core/nominated.py) stays taken. WHOLE_ONLY: the gang
        may be disrupted only whole (disruptionMode all): no part moves, it is broken at once."""
        if not any(m.node is not None for m in gang.members()):
            return None
        if whole_only:
            self.broken.setdefault(group, now)
            return None
        if self._tried.get(group) == self.state.version:
            return None  # nothing changed since a search found nothing
        taken = nominated_room(self.state, self.membership, group)
        found = plan_repair(gang, lambda pods: self._without(pods, taken))
        if found is None:
            self._tried[group] = self.state.version
            self.broken.setdefault(group, now)
        else:
            self._tried.pop(group, None)
        return found

    def _without(self, pods: Mapping[str, str], taken: Mapping[str, Mapping[str, int]]) -> ClusterSnapshot:
        give_back: dict[str, Counter[str]] = {}
        nodes = self.state.table.nodes
        for pod, node in pods.items():  # with the devices its own claims hold (DRA)
            info = self.state.pods.get(pod)
            if info is not None:
                give_back.setdefault(node, Counter()).update(self.state.claimed.held(info, nodes))
            elif (held := self.state.reservations.get(pod)) is not None:  # room held for a pod not created yet
                give_back.setdefault(node, Counter()).update(held[1])
        return self.state.snapshot(give_back, taken)

    def start(self, group: str, repair: Repair, now: float) -> Underway:
        self.settle(group)
        self.broken.pop(group, None)
        pending = {p for p in repair.moved if p in self.state.pods}
        held = {p: n for p, n in repair.plan.assignments.items() if p in self.state.pods}
        for pod, node in held.items():
            self.state.reserve(pod, node, self.state.pods[pod].requests)
        underway = self.underway[group] = Underway(repair, now, pending, held)
        for pod in pending:
            self._moved[pod] = group
        self.last[group] = LastRepair(repair.describe(), now)
        self.evicted.record(eviction(group, REPAIRED, repair.describe(), repair.moved, now, whole=False))
        return underway

    def gone(self, pod: str) -> None:
        group = self._moved.pop(pod, None)
        underway = self.underway.get(group) if group else None
        if underway is not None:
            underway.pending.discard(pod)

    def settle(self, group: str) -> Underway | None:
        """Give back the room held for GROUP's repair (it is about to be planned for real)."""
        underway = self.underway.pop(group, None)
        if underway is not None:
            for pod in underway.held:
                self.state.unreserve(pod)
            for pod in underway.pending:
                self._moved.pop(pod, None)
        return underway

    def mended(self, group: str) -> None:
        """GROUP was planned whole again: no longer broken."""
        self.broken.pop(group, None)
        self._tried.pop(group, None)

    def forget(self, group: str) -> None:
        """GROUP is gone."""
        self.settle(group)
        self.mended(group)
        self.last.pop(group, None)

    def drop_all(self) -> None:
        """This replica stops leading: the room of every repair under way is given back and no
        gang counts as broken (a new term finds them again, with a clock of its own)."""
        for group in list(self.underway):
            self.settle(group)
        self.broken.clear()
        self._tried.clear()

    def given_up(self, now: float, reasons: Reasons | None = None) -> list[str]:
        """Gangs broken for longer than the timeout (removed from the broken list), repairs whose
        moved pods did not all leave in that time (their room given back), and, from REASONS,
        gangs whose leaders run alone: the pods their controller creates after them did not come
        within the plan's lifetime (`R_FOLLOWERS_MISSING`), so their room was released; each is
        given up once, its `on-unrepairable` policy deciding."""
        late = [g for g, since in self.broken.items() if now - since > self.timeout]
        for group in late:
            del self.broken[group]
        stuck = [g for g, u in self.underway.items() if u.pending and now - u.started > self.timeout]
        for group in stuck:
            self.settle(group)
        alone = [g for g in reasons or () if reasons is not None and reasons[g].kind == R_FOLLOWERS_MISSING]
        return late + stuck + [g for g in alone if g not in late and g not in stuck]

    def reason(self, group: str) -> Repairing:
        """Why GROUP's members wait: its repair under way."""
        underway = self.underway[group]
        return Repairing(underway.repair.describe(), len(underway.pending))

    def verdict(
        self,
        pods: list[PodInfo],
        why: Reason | None,
        group: Mapping[str, str] | None = None,
        now: float = 0.0,
        *,
        whole_only: bool = False,
    ) -> tuple[Unrepairable, list[PodInfo]]:
        """A gang given up (PODS, last said WHY; GROUP: its group object's annotations) at NOW: the
        reason, and its running pods to evict (none unless the workload asks to be evicted whole,
        or may be disrupted only whole)."""
        evict, note = unrepairable_policy(pods, group, whole_only=whole_only)
        bound = [p for p in pods if p.node_name is not None and not p.terminal] if evict else []
        text = why.render() if why is not None and why.kind != R_REPAIRING else "the moved pods did not leave"
        head = "the gang cannot be made whole" if why is not None and why.kind == R_FOLLOWERS_MISSING else ""
        verdict = Unrepairable(text, self.timeout, len(bound), note, head)
        gang = self.membership.group_of(bound[0].key) if bound else None
        if gang is not None:
            self.evicted.record(eviction(gang, UNREPAIRABLE, verdict.render(), [p.key for p in bound], now))
        return verdict, bound

    def pending(self, group: str, pod: str) -> bool:
        """Whether POD must still leave for GROUP's repair under way."""
        underway = self.underway.get(group)
        return underway is not None and pod in underway.pending

    def last_of(self, group: str) -> LastRepair | None:
        """GROUP's last repair (what moved, and when), if any."""
        return self.last.get(group)

    def note(self, group: str, text: str) -> None:
        """GROUP's PodGroup status tells of a repair (made by this or an earlier leader)."""
        self.recorded[group] = text

    def last_text(self, group: str) -> str:
        """The last repair of GROUP this replica made, else the one its PodGroup tells of."""
        live = self.last.get(group)
        return live.message if live is not None else self.recorded.get(group, "")

    def sweep(self, groups: set[str]) -> None:
        """Forget the gangs not in GROUPS (gone)."""
        for group in (set(self.underway) | set(self.broken) | set(self.last)) - groups:
            self.forget(group)
