"""Plans and their reservations: the room each planned gang holds until its pods bind.

A plan being carried out is a `GroupPlan`: the placement, the pods it still holds a node for
(each one reserved in `ClusterState`, so other gangs plan around it and plain pods keep off it),
the room it holds for pods not created yet (a JobSet Job's followers, made once its leader is
scheduled: grouping/expected.py), and its bind gate. `Plans` is the only writer of those
reservations: a plan is held, extended, its members traded between nodes, a member let go when it
binds or leaves, a pod not created yet taking its held room when it comes, and the whole plan
released. Where each gang's last plan put its constrained scopes outlives the plan (`domains`),
for its status once it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from extender.core.cluster import ClusterState, shortfall
from extender.core.decisions import R_FOLLOWERS_MISSING, R_PLAN_EXPIRED, FilterResult, Released
from extender.core.gate import Gate
from extender.model.pod import PodInfo
from extender.placement import DomainRef, Plan

RESERVED = "topogang: capacity reserved for a gang"
HELD = "topogang: room held for a waiting gang (a reservation; see its PodGroup's status)"
UNSEEN = "topogang: capacity taken by pods topogang bound that kube-scheduler has not seen bound yet"


@dataclass
class GroupPlan:
    """A plan being carried out: what is reserved, what has reached the bind gate."""

    plan: Plan
    generation: int
    reserved: dict[str, str]  # pod -> node, not bound yet
    gate: Gate  # the minimum, who of it reached bind, and when the last new one did
    created: float
    touched: float  # last progress: a plan, a pod reaching bind, a pod seen bound (`stalled`)
    bound: int = 0  # pods of the plan seen bound, counted as they bind...
    bound_looked: int = 0  # ... and as `stalled` last looked
    # stand-in -> node: room held for pods not created yet (GroupView.expected), reserved in
    # ClusterState under the stand-in's key until the pod comes and takes it (`claim`). Never
    # in the gate's minimum: nothing of them can reach bind before they exist.
    expected: dict[str, str] = field(default_factory=dict)


class Plans:
    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self._by_group: dict[str, GroupPlan] = {}
        # pod -> the group whose plan holds it: a pod's gang can stop resolving before the pod
        # goes (its PodGroup deleted first), and its room must still be given back then
        self._holder: dict[str, str] = {}
        self._domains: dict[str, Mapping[str, DomainRef]] = {}  # group -> where its last plan put each scope
        self._generation = 0
        self.last_domains: Mapping[str, Mapping[str, DomainRef]] = MappingProxyType(self._domains)

    # -- reading -------------------------------------------------------------------------------

    def __contains__(self, group: object) -> bool:
        return group in self._by_group

    def __getitem__(self, group: str) -> GroupPlan:
        return self._by_group[group]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._by_group))

    def __len__(self) -> int:
        return len(self._by_group)

    def get(self, group: str | None) -> GroupPlan | None:
        return self._by_group.get(group) if group is not None else None

    def holder(self, pod: str) -> str | None:
        """The group whose plan holds room for POD, if any."""
        return self._holder.get(pod)

    def reserved(self, group: str) -> Mapping[str, str]:
        """Pod -> planned node for GROUP's pods that hold a reservation."""
        gp = self._by_group.get(group)
        return gp.reserved if gp is not None else {}

    def expected(self, group: str) -> Mapping[str, str]:
        """Stand-in -> node: the room GROUP's plan holds for pods not created yet."""
        gp = self._by_group.get(group)
        return gp.expected if gp is not None else {}

    def domains(self, group: str) -> Mapping[str, DomainRef]:
        """Where GROUP's plan (or, once carried out, its last plan) put each constrained scope."""
        gp = self._by_group.get(group)
        return gp.plan.domains if gp is not None else self._domains.get(group, {})

    def generation(self, group: str) -> int:
        gp = self._by_group.get(group)
        return gp.generation if gp else 0

    def next_generation(self) -> int:
        """A new generation number, for a plan or for wake-ups that are not a new plan."""
        self._generation += 1
        return self._generation

    def still_fits(self, node: str) -> bool:
        """Whether NODE exists, is schedulable, and none of its room is overcommitted."""
        info = self._state.nodes.get(node)
        if info is None or not info.schedulable:
            return False
        devices = self._state.devices.selections  # the device resources pods ask for (DRA)
        return all(self._state.free_on(node, r) >= 0 for r in (*info.allocatable, *devices))

    def admit_plain(self, pod: PodInfo, nodes: Sequence[str], held: frozenset[str] = frozenset()) -> FilterResult:
        """Plain pods pass, except onto nodes where they would take a gang's reserved room or the
        room of pods topogang bound itself that kube-scheduler may not have seen bound yet
        (core/posted.py: its own filters count that room free), and HELD ones (room a
        reservation keeps for a waiting gang). Those nodes are unresolvable: kube-scheduler's
        preemption would evict pods there for a pod topogang refuses again (it skips them)."""
        refused = self._taking(pod, nodes)
        if held:
            refused.update((n, HELD) for n in nodes if n in held)
        if not refused:
            return FilterResult(nodes if isinstance(nodes, list) else list(nodes))
        reason = next(r for r in (RESERVED, UNSEEN, HELD) if r in refused.values())
        return FilterResult([n for n in nodes if n not in refused], unresolvable=refused, reason=reason)

    def _taking(self, pod: PodInfo, nodes: Sequence[str]) -> dict[str, str]:
        """The NODES where POD would take reserved room, or room bound pods kube-scheduler has not
        seen take, with why. Plain pods are the hot path: when fewer nodes hold such room than
        are offered (the usual case), only those are checked, and the offered names are scanned
        once only if one of them is full."""
        reserved, posted = self._state.reserved_nodes, self._state.posted.nodes
        if not reserved and not posted:
            return {}
        state, requests = self._state, pod.requests

        def full(node: str) -> bool:
            return shortfall(state, node, requests) is not None

        if len(reserved) + len(posted) < len(nodes):
            kept = dict.fromkeys(posted, UNSEEN) | dict.fromkeys(reserved, RESERVED)
            taken = {n: why for n, why in kept.items() if full(n)}
            return {n: taken[n] for n in nodes if n in taken} if taken else {}
        out = {}
        for node in nodes:
            why = RESERVED if node in reserved else UNSEEN if node in posted else None
            if why is not None and full(node):
                out[node] = why
        return out

    # -- writing -------------------------------------------------------------------------------

    def hold(
        self, group: str, result: Plan, now: float, expected: Mapping[str, PodInfo] | None = None
    ) -> tuple[dict[str, str], dict[str, str], str]:
        """Reserve RESULT's pods that GROUP's plan does not hold yet: a new plan, or the plan
        extended; EXPECTED: the stand-ins of pods not created yet among them, whose room is held
        for them. Returns (pod -> node reserved now, stand-in -> node held now, "planned" or
        "extended")."""
        gp = self._by_group.get(group)
        expected = expected or {}
        new, held = {}, {}
        for pod, node in result.assignments.items():
            if pod in expected:
                if gp is None or pod not in gp.expected:
                    held[pod] = node
            elif gp is None or pod not in gp.reserved:
                new[pod] = node
        for pod, node in new.items():
            self._state.reserve(pod, node, self._state.pods[pod].requests)
            self._holder[pod] = group
        for slot, node in held.items():
            self._state.reserve(slot, node, expected[slot].requests)
            self._holder[slot] = group
        self._domains[group] = result.domains
        if gp is None:
            gate = Gate(frozenset(p for p in result.minimum if p not in expected))
            # Only room for pods not created yet, its leaders bound already (a new leader of topogang
            # found it so): nothing is left to wait for at the gate.
            gate.opened = bool(held) and not gate.minimum
            gp = GroupPlan(result, self.next_generation(), dict(new), gate, now, now, expected=dict(held))
            self._by_group[group] = gp
            return new, held, "planned"
        gp.reserved.update(new)
        gp.expected.update(held)
        gp.touched = now
        return new, held, "extended"

    def claim(self, group: str, pod: PodInfo, slot_of: Callable[[str], str | None]) -> GroupPlan | None:
        """GROUP's plan; first, when POD was created in the place of a stand-in whose room the plan
        holds (SLOT_OF(pod key): its key), POD takes that room if its node still admits it (its node
        selector: JobSet's points at its leader's domain) and holds its requests. Else the plan's
        held room no longer matches the gang as it runs (its leader bound elsewhere, the node
        taken): all of it goes back, and the pod and the stand-ins are planned again as pods the
        plan lacks."""
        gp = self._by_group.get(group)
        if gp is None or not gp.expected or pod.key in gp.reserved:
            return gp
        slot = slot_of(pod.key)
        node = gp.expected.get(slot) if slot is not None else None
        if node is None or slot is None:
            return gp
        self._drop(gp, [slot])
        info = self._state.nodes.get(node)
        table = self._state.table
        at = table.index.get(node)
        fits = info is not None and info.schedulable and at is not None and table.eligibility(pod.placement).mask[at]
        if not fits or shortfall(self._state, node, pod.requests) is not None:
            self._drop(gp, list(gp.expected))
            return gp
        self._state.reserve(pod.key, node, pod.requests)
        self._holder[pod.key] = group
        gp.reserved[pod.key] = node
        return gp

    def adopt(self, group: str, pod: PodInfo, node: str, now: float) -> GroupPlan:
        """POD, made in the place of a member of GROUP moved for another gang, takes the room held
        for it on NODE (chosen within its gang's constraints when the move was decided): it joins
        GROUP's plan, or a plan of its own whose gate is open (its gang runs: its minimum is
        bound, and this pod is beyond it)."""
        gp = self._by_group.get(group)
        if gp is None:
            result = Plan(group, {pod.key: node}, dict(self._domains.get(group, {})))
            gate = Gate(frozenset())
            gate.opened = True
            gp = GroupPlan(result, self.next_generation(), {}, gate, now, now)
            self._by_group[group] = gp
        self._state.reserve(pod.key, node, pod.requests)
        self._holder[pod.key] = group
        gp.reserved[pod.key] = node
        gp.touched = now
        return gp

    def swap(self, gp: GroupPlan, pod: str, mate: str) -> None:
        """POD and MATE (interchangeable members of one plan) trade their planned nodes; never
        one whose node is fixed (at the gate, or being bound there)."""
        assert not gp.gate.fixed(pod), "a fixed node is never traded"
        assert not gp.gate.fixed(mate), "a fixed node is never traded"
        mine, theirs = gp.reserved[pod], gp.reserved[mate]
        gp.reserved[pod], gp.reserved[mate] = theirs, mine
        self._state.reserve(pod, theirs, self._state.pods[pod].requests)
        self._state.reserve(mate, mine, self._state.pods[mate].requests)

    def let_go(self, gp: GroupPlan, pod: str, bound: bool = False) -> None:
        """POD no longer needs its planned room: it BOUND (there or elsewhere: progress), or it
        left. Either way it is no longer waited for at the gate, nor bound when the gate opens (a
        pod beyond the minimum deleted while it waited there would be bound after its deletion)."""
        if bound:
            gp.bound += 1
        del gp.reserved[pod]
        gp.gate.arrived.pop(pod, None)
        gp.gate.binding.discard(pod)
        self._holder.pop(pod, None)
        self._state.unreserve(pod)

    def _drop(self, gp: GroupPlan, slots: Sequence[str]) -> None:
        """Give back the room GP holds for the stand-ins SLOTS."""
        for slot in slots:
            del gp.expected[slot]
            self._state.unreserve(slot)
            self._holder.pop(slot, None)

    def release(self, group: str) -> GroupPlan | None:
        """Drop GROUP's plan and the reservation of every pod it still held."""
        gp = self._by_group.pop(group, None)
        if gp is None:
            return None
        for pod in (*gp.reserved, *gp.expected):
            self._state.unreserve(pod)
            self._holder.pop(pod, None)
        self._domains.pop(group, None)
        return gp

    def stalled(self, now: float, ttl: float) -> dict[str, Released]:
        """The plans that made no progress for TTL seconds (no pod reached bind or bound, none was
        added), each with why it goes. A pod seen bound since the last look is progress made NOW:
        the watch that tells of it carries no clock, so a large gang binding slowly keeps its plan.
        A plan whose gate opened goes too while it holds room for pods that never bind (pods
        beyond the minimum whose calls never come; in gates mode, ungated pods kube-scheduler
        cannot place; pods not created yet that never come); carried out (nothing held), it is the
        sweep's."""
        out = {}
        for group, gp in self._by_group.items():
            if gp.bound != gp.bound_looked:
                gp.bound_looked, gp.touched = gp.bound, now
            elif now - gp.touched > ttl and (gp.reserved or gp.expected or not gp.gate.opened):
                unbound = len(gp.reserved) + len(gp.expected) if gp.gate.opened else 0
                kind = R_FOLLOWERS_MISSING if gp.gate.opened and gp.expected else R_PLAN_EXPIRED
                out[group] = Released(kind, seconds=ttl, unbound=unbound)
        return out

    def sweep(self, groups: set[str]) -> list[str]:
        """Forget plans carried out (every pod bound), release those of gangs not in GROUPS
        (gone: their room goes back) and forget the last domains of those; returns the groups
        whose plans were forgotten."""
        done = [g for g, gp in self._by_group.items() if gp.gate.opened and not gp.reserved and not gp.expected]
        for group in done:
            del self._by_group[group]  # carried out: the bound pods now speak for the gang
        gone = [g for g in self._by_group if g not in groups]
        for group in gone:
            self.release(group)  # its pods went without a word for each (a relist): their room too
        done += gone
        for group in set(self._domains) - groups:
            del self._domains[group]
        return done
