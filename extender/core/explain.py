"""`topogang explain`: why a gang is where it is, or why it is not anywhere yet.

For one gang: its source and phase, the SubGroup tree with each minimum and constraint, how many
pods exist, are planned and are bound per scope and where they landed, what planning it now would
do (a dry run against the current cluster, its own reservations given back), why there (the
engine's ranking of the candidate domains at each level: explain_why.py), the nodes left out for
each pod shape with counts by reason, and what evicted or moved it and when (core/evicted.py).
Built as data here; `render` makes the text, explain_json.py the JSON.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from extender.core.decisions import R_WAITING
from extender.core.decisions_room import BudgetBlocked
from extender.core.defragmenting import MOVING
from extender.core.evicted import REPAIRED, Eviction
from extender.core.exclusivity import snapshot_for
from extender.core.explain_devices import device_lines
from extender.core.explain_why import DRY_RUN, Why, replay, why_lines
from extender.core.held_room import rfc3339
from extender.core.scheduler import GangScheduler
from extender.core.standing import Headline
from extender.placement import (
    NO_CAPACITY,
    NO_DOMAIN,
    Excluded,
    Gang,
    NoPreemption,
    Plan,
    Preemption,
    Scope,
    TopologyTree,
    Unplaceable,
    left_out,
    plan,
    scope_minimum_pods,
)


@dataclass(frozen=True)
class ScopeLine:
    depth: int
    label: str
    minimum: str  # "4 pods", "3 of 4 SubGroups"
    constraint: str  # "required rack, preferred node (spec.topologyConstraints...)"
    present: int
    planned: int
    bound: int
    where: tuple[str, ...] = ()  # domains (or nodes, for leaves) its pods are on


@dataclass(frozen=True)
class Explanation:
    group: str
    source: str
    phase: str
    message: str
    topology: str = ""
    lines: tuple[ScopeLine, ...] = ()
    outcome: str = ""  # the dry run: "fits: ..." or "does not fit: <reason>"
    left_out: Mapping[str, Mapping[Excluded, int]] = field(default_factory=dict)  # shape -> why -> nodes
    notes: tuple[str, ...] = ()  # warnings, pods waiting outside the gang
    last_repair: str = ""  # what the gang's last repair moved
    reservation: str = ""  # the room held for it while it waits, and its estimated start
    overdue: str = ""  # it has waited past its maximum wait: since when, and what it holds
    queue: str = ""  # its place in the queue and its estimated start
    assumed: str = ""  # what that estimate assumed
    preemption: tuple[str, ...] = ()  # the preemption under way, or what one would do now
    defragmentation: tuple[str, ...] = ()  # the pods moving out of its domain, or what a move would be now
    devices: tuple[str, ...] = ()  # devices (Dynamic Resource Allocation) asked and free per domain
    asked: Asked | None = None  # the pod NAME was, when `explain` was asked about a pod
    why: Why | None = None  # why there: the engine's rankings (a replay once placed, else the dry run)
    evicted: str = ""  # what evicted its pods last, and when, in words
    eviction: Eviction | None = None  # the same as data, when this process decided it (else the status told)
    evicted_at: str = ""  # when, in words ("at 2026-11-25T10:30:00Z")
    evicted_time: str | None = None  # when, RFC 3339 (None: no wall clock known)
    evicted_for: tuple[str, ...] = ()  # the workloads preempted to make room for it, and when


@dataclass(frozen=True)
class Asked:
    """The pod `explain` was asked about, as its gang has it."""

    pod: str
    scope: str  # the label of its SubGroup (or PodGroup); "" when not known (evicted)
    state: str  # BOUND, PLANNED, PENDING or EVICTED
    node: str = ""  # bound to, or planned for
    note: str = ""  # why it waits outside its gang, a gate

    def render(self) -> str:
        where = {BOUND: f"bound to {self.node}", PLANNED: f"planned for {self.node}, not bound yet"}
        where[EVICTED] = "evicted (it no longer exists)"
        text = where.get(self.state, self.state.lower())
        scope = f" ({self.scope})" if self.scope else ""
        return f"pod {self.pod}{scope}: {text}" + (f"; {self.note}" if self.note else "")


BOUND, PLANNED, PENDING, EVICTED = "Bound", "Planned", "Pending", "Evicted"


def explain(scheduler: GangScheduler, group: str, pod: str = "") -> Explanation:
    """GROUP explained; POD: the pod the question was about (one of its members, or evicted)."""
    memory = scheduler.evicted
    if not scheduler.lookup.has_pods(group) and (memory.of(group) is not None or memory.noted(group)):
        return _gone(scheduler, group, pod)
    view = scheduler.lookup.view(group)
    status = scheduler.status(group)
    notes = [*view.warnings, *(f"{pod}: {why}" for pod, why in sorted(view.waiting.items()))]
    notes += _gated(scheduler, view.pods)
    gang = view.built.gang if view.built is not None else None
    told = Explanation(group, view.source, status.phase, status.message, notes=tuple(notes))
    told = _remembered(scheduler, group, gang, pod, told)
    if gang is None or not view.valid:
        return told
    state = scheduler.state
    tree = state.table.tree(gang.topology)
    reserved = {**scheduler.reserved(group), **scheduler.plans.expected(group)}  # pods not created yet too
    node_of = {k: p.node_name for k in view.pods if (p := state.pods.get(k)) is not None and p.node_name}
    planned_on = {**reserved, **node_of}
    lines = _lines(gang.root, 0, tree, state.table.index, planned_on, set(node_of), set(view.expected))
    base = replace(
        told,
        topology=f"{gang.topology.name or '(none)'}: {gang.topology.describe()}",
        lines=tuple(lines),
        reservation=scheduler.reserving.text(group),
    )
    base = _waiting(scheduler, group, base)
    if all(m.key in node_of for m in gang.members()):
        return replace(base, outcome="nothing to plan: every pod is bound", why=replay(scheduler, group, gang, node_of))
    # The dry run: this gang's own reservations go back; its bound pods stay where they are.
    give_back: dict[str, Counter[str]] = {}
    for pod_key, node in reserved.items():
        info = state.pods.get(pod_key) or view.expected.get(pod_key)
        if info is not None:
            give_back.setdefault(node, Counter()).update(info.requests)
    snapshot = snapshot_for(state, scheduler.membership, group, gang, give_back=give_back)
    result = plan(snapshot, gang, explain=True)
    preemption = _preemption(scheduler, group, None if isinstance(result, Plan) else result)
    moving = _defragmentation(scheduler, group, None if isinstance(result, Plan) else result)
    why = Why(DRY_RUN, result.rankings) if isinstance(result, Plan) else None
    if isinstance(result, Plan):
        levels = "; ".join(f"{lv} {', '.join(d)}" for lv, d in result.levels.items() if d)
        extra = f"; {len(result.unplaced)} optional pod(s) would not fit" if result.unplaced else ""
        outcome = f"fits: {len(result.assignments)} pod(s) would be placed ({levels}){extra}"
        headline = "not planned yet, and it fits now: kube-scheduler has not sent its pods since"
    else:
        assert isinstance(result, Unplaceable)
        # a gang that does not fit even with nothing running: that is what to tell (feasible.py)
        never = (
            scheduler.reserving.feasible.never(group, gang) if result.reason.kind in (NO_DOMAIN, NO_CAPACITY) else None
        )
        outcome = f"does not fit: {result.message if never is None else never.render()}"
        headline = outcome
    shapes = {s.describe(): left_out(snapshot, s) for s in gang.shapes}
    # A complete gang this scheduler never tried (always so for `explain` on a live cluster,
    # whose cache is fresh) would say "waiting to be planned": the dry run knows better.
    message = replace(status, said=(Headline(headline),)).message if status.reason == R_WAITING else status.message
    left = {k: v for k, v in shapes.items() if v}
    devices = device_lines(state, gang, snapshot, tree)
    return replace(
        base,
        message=message,
        outcome=outcome,
        left_out=left,
        preemption=preemption,
        defragmentation=moving,
        devices=devices,
        why=why,
    )


def _waiting(scheduler: GangScheduler, group: str, e: Explanation) -> Explanation:
    """E with whether GROUP is overdue, its place in the queue, its estimated start and what that
    assumed: this replica's, else (a live cluster) what its PodGroup status says."""
    reserving = scheduler.reserving
    late, expected = reserving.overdue_of(group), reserving.expected(group)
    told = reserving.recorded_wait(group)
    return replace(
        e,
        overdue=late.render() if late is not None else told[0],
        queue=expected.render() if expected is not None else told[1],
        assumed=expected.assumed() if expected is not None else "",
    )


def _remembered(scheduler: GangScheduler, group: str, gang: Gang | None, pod: str, e: Explanation) -> Explanation:
    """E with what the scheduler remembers of GROUP: its last repair and eviction (with when), the
    preemptions made for it, and the pod POD asked about."""
    evicted = scheduler.evicted.of(group)
    shown = evicted if evicted is not None and evicted.cause != REPAIRED else None  # (a repair has its own line)
    at, time = _when(scheduler, shown.at) if shown is not None else ("", None)
    told = shown.render(at) if shown is not None else scheduler.evicted.noted(group)  # (a live cluster: the status)
    victims = tuple(
        f"{v.workload} ({v.count} pod(s){'' if v.whole else ' beyond its minimum'}) {_when(scheduler, v.at)[0]}"
        for v in scheduler.evicted.made_for(group)
    )
    return replace(
        e,
        last_repair=_last_repair(scheduler, group),
        asked=_asked(scheduler, group, gang, pod) if pod else None,
        evicted=told,
        eviction=shown,
        evicted_at=at,
        evicted_time=time,
        evicted_for=victims,
    )


def _gone(scheduler: GangScheduler, group: str, pod: str) -> Explanation:
    """A gang (or plain pod) none of whose pods exists any more: what evicted it, and when."""
    evicted = scheduler.evicted.of(group)
    gang = evicted is None or evicted.gang
    kind = "PodGroup" if scheduler.lookup.podgroup(group) is not None else "gang" if gang else "plain pod"
    message = "none of its pods exists now" + ("; its workload may create them again" if gang else "")
    told = Explanation(group, f"{kind} {group}", EVICTED, message)
    if evicted is not None and evicted.cause == REPAIRED:  # (its moved pods, while they are made again)
        return replace(_remembered(scheduler, group, None, pod, told), last_repair=evicted.render())
    return _remembered(scheduler, group, None, pod, told)


def _when(scheduler: GangScheduler, at: float) -> tuple[str, str | None]:
    """AT (the scheduler's clock) in words, and as RFC 3339 when a wall clock is known."""
    wall = scheduler.reserving.wall(at)
    if wall is None:
        return f"at {at:g}s on the scheduler's clock, no wall clock known", None
    time = rfc3339(round(wall))
    return f"at {time}", time


def _last_repair(scheduler: GangScheduler, group: str) -> str:
    """The last repair with when it started, when this scheduler made it (else as the status tells)."""
    live = scheduler.repairs.last_of(group)
    if live is None:
        return scheduler.repairs.last_text(group)
    return f"{live.message}, {_when(scheduler, live.at)[0]}"


def _asked(scheduler: GangScheduler, group: str, gang: Gang | None, pod: str) -> Asked:
    """POD, one of GROUP's: which scope holds it and where it is."""
    scope = next((s.label for s in gang.scopes if any(m.key == pod for m in s.members)), "") if gang else ""
    info = scheduler.state.pods.get(pod)
    if info is None:
        return Asked(pod, scope, EVICTED)
    view = scheduler.lookup.view(group)
    gates = f"gated by {', '.join(info.scheduling_gates)}" if info.scheduling_gates else ""
    note = view.waiting.get(pod, "") or gates
    if info.node_name is not None:
        return Asked(pod, scope, BOUND, info.node_name, note)
    planned = scheduler.reserved(group).get(pod)
    return Asked(pod, scope, PLANNED if planned else PENDING, planned or "", note)


def _preemption(scheduler: GangScheduler, group: str, refused: Unplaceable | None) -> tuple[str, ...]:
    """The preemption under way for GROUP; else, when it does not fit (REFUSED), what one would do now."""
    nom = scheduler.preempting.nomination(group)
    if nom is not None and nom.preemption.moves:
        return ()  # a move, not a preemption (`_defragmentation`)
    if nom is not None:
        return (f"under way: {nom.describe()}", *_victims(nom.preemption))
    if refused is None:
        return ()
    found = scheduler.preempting.dry_run(group)
    if isinstance(found, NoPreemption) and found.overruns:
        return (f"would evict nothing: {BudgetBlocked(refused.reason, found.overruns).refusal()}", found.reason)
    if isinstance(found, NoPreemption):
        return (f"would not help: {found.reason}",)
    return (f"would evict in {found.domain}:", *_victims(found))


def _defragmentation(scheduler: GangScheduler, group: str, refused: Unplaceable | None) -> tuple[str, ...]:
    """The move under way for GROUP; else, when it does not fit (REFUSED), what a move would be now."""
    nom = scheduler.preempting.nomination(group)
    if nom is not None and nom.preemption.moves:
        return (f"under way: {nom.describe()}", *_moves(nom.preemption))
    if refused is None or nom is not None:
        return ()
    found = scheduler.defragmenting.search(group)
    if isinstance(found, NoPreemption) and found.overruns:
        why = BudgetBlocked(refused.reason, found.overruns, verb=MOVING).refusal()
        return (f"would move nothing: {why}", found.reason)
    if isinstance(found, NoPreemption):
        return (f"would not help: {found.reason}",)
    return (f"would move {len(found.pods)} pod(s) out of {found.domain}:", *_moves(found))


def _moves(p: Preemption) -> tuple[str, ...]:
    shown = [f"{pod} to node {node}" for pod, node in sorted(p.moves.items())]
    return (
        f"moved, each to room held for its replacement: {', '.join(shown[:8])}"
        + (f" and {len(shown) - 8} more" if len(shown) > 8 else ""),
        "why these: the fewest movable pods (then the least room taken, the youngest) whose move makes "
        f"{p.domain} hold the gang, each with a place outside it; never beyond what PodDisruptionBudgets allow",
    )


def _victims(p: Preemption) -> tuple[str, ...]:
    out = []
    if p.victims:
        shown = ", ".join(p.victims[:8]) + (f" and {len(p.victims) - 8} more" if len(p.victims) > 8 else "")
        out.append(f"victims, evicted whole: {shown}")
    for workload, pods in sorted(p.elastic.items()):
        out.append(f"{len(pods)} pod(s) beyond the minimum of {workload}: {', '.join(pods[:8])}")
    out.append(
        f"why these: the least costly in {p.domain} ({p.cost.describe(p.resources)}); never beyond what "
        f"PodDisruptionBudgets allow, then compared by highest priority, workloads, pods, "
        f"{', '.join(p.resources) or 'resources'} taken, start time; {p.domains_checked} domain(s) checked "
        f"with {p.plans} plan(s)"
    )
    return tuple(out)


def _gated(scheduler: GangScheduler, pods: Iterable[str]) -> list[str]:
    """Pods kube-scheduler will not schedule yet: their spec.schedulingGates is not empty."""
    out = []
    for key in sorted(pods):
        pod = scheduler.state.pods.get(key)
        if pod is not None and pod.scheduling_gates and pod.node_name is None:
            gates = ", ".join(pod.scheduling_gates)
            out.append(f"{key}: gated by {gates}: kube-scheduler does not schedule it until the gate is removed")
    return out


def _lines(
    scope: Scope,
    depth: int,
    tree: TopologyTree,
    index: Mapping[str, int],
    planned_on: Mapping[str, str],
    bound: set[str],
    absent: set[str],
) -> list[ScopeLine]:
    """ABSENT: stand-ins of pods not created yet, members that are not present."""
    members = [m.key for m in scope.all_members()]
    placed = [planned_on[k] for k in members if k in planned_on]
    if scope.leaf:
        minimum = f"{scope.min_member} pod{'s' if scope.min_member != 1 else ''}"
    else:
        minimum = f"{scope.min_member} of {sum(c.weight for c in scope.children)} SubGroups"
        elastic = sum(c.weight for c in scope.children if scope_minimum_pods(c) == 0)
        if elastic:  # (they count towards the minimum, and need no pod)
            minimum += f", {elastic} of them elastic (no pod required)"
    rule = scope.rule
    parts = []
    if rule is not None and rule.required is not None:
        parts.append(f"required {tree.level_name(rule.required)}" + (" (exclusive)" if rule.exclusive else ""))
    if rule is not None and rule.preferred is not None:
        parts.append(f"preferred {tree.level_name(rule.preferred)}")
    constraint = ", ".join(parts) + (f" ({rule.source})" if rule is not None and parts else "")
    if scope.leaf:
        where = tuple(sorted(set(placed)))
    else:
        level = rule.required if rule is not None and rule.required is not None else None
        where = tuple(
            sorted({tree.describe(tree.node_domain(index[n], level)) for n in placed if n in index} if level else ())
        )
    line = ScopeLine(
        depth,
        scope.label,
        minimum,
        constraint,
        sum(1 for k in members if k not in absent),
        len(placed),
        sum(1 for k in members if k in bound),
        where,
    )
    out = [line]
    for child in scope.children:
        out.extend(_lines(child, depth + 1, tree, index, planned_on, bound, absent))
    return out


def render(explanations: Sequence[Explanation]) -> str:
    out: list[str] = []
    for e in explanations:
        out.append(f"{e.group}  ({e.source or 'no source'})  {e.phase}")
        out.append(f"  {e.message}")
        if e.asked is not None:
            out.append(f"  Asked about {e.asked.render()}")
        if e.evicted:
            out.append(f"  Evicted: {e.evicted}")
        if e.topology:
            out.append(f"  Topology {e.topology}")
        if e.lines:
            out.append("  SubGroup tree (min; constraint; pods present / planned / bound; where):")
        for line in e.lines:
            indent = "  " * (line.depth + 2)
            constraint = f"; {line.constraint}" if line.constraint else ""
            counts = f"{line.present} / {line.planned} / {line.bound}"
            where = f"; on {', '.join(line.where[:8])}" + (" ..." if len(line.where) > 8 else "") if line.where else ""
            out.append(f"{indent}{line.label}: min {line.minimum}{constraint}; {counts}{where}")
        if e.outcome:
            out.append(f"  Planning it now: {e.outcome}")
        out.extend(f"  {line}" for line in (why_lines(e.why) if e.why is not None else ()))
        for device_line in e.devices:
            out.append(f"  Devices: {device_line}")
        for shape, reasons in e.left_out.items():
            texts = sorted(((str(why), n) for why, n in reasons.items()), key=lambda kv: (-kv[1], kv[0]))
            shown = ", ".join(f"{n} {why}" for why, n in texts)
            out.append(f"  Nodes left out for pods of {shape}: {shown}")
        for i, text in enumerate(e.preemption):
            out.append(f"  {'Preemption: ' if i == 0 else '    '}{text}")
        for i, text in enumerate(e.defragmentation):
            out.append(f"  {'Defragmentation: ' if i == 0 else '    '}{text}")
        if e.evicted_for:
            out.append(f"  Preempted for it: {'; '.join(e.evicted_for)}")
        if e.last_repair:
            out.append(f"  Last repair: {e.last_repair}")
        if e.overdue:
            out.append(f"  Overdue: {e.overdue}")
        if e.reservation:
            out.append(f"  Reservation: {e.reservation}")
        if e.queue:
            out.append(f"  Queue: {e.queue}" + (f"; {e.assumed}" if e.assumed else ""))
        for note in e.notes:
            out.append(f"  Note: {note}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"
