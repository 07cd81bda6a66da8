"""`topogang explain`: why a gang is where it is, or why it is not anywhere yet.

For one gang: its source and phase, the SubGroup tree with each minimum and constraint, how many
pods exist, are planned and are bound per scope and where they landed, what planning it now would
do (a dry run against the current cluster, its own reservations given back), and the nodes left
out for each pod shape with counts by reason. Built as data here; `render` makes the text.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from extender.core.decisions import R_WAITING, BudgetBlocked, Headline
from extender.core.explain_devices import device_lines
from extender.core.nominated import nominated_room
from extender.core.scheduler import GangScheduler
from extender.model.keys import GroupKey
from extender.placement import (
    Excluded,
    NoPreemption,
    Plan,
    Preemption,
    Scope,
    TopologyTree,
    Unplaceable,
    left_out,
    plan,
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
    preemption: tuple[str, ...] = ()  # the preemption under way, or what one would do now
    devices: tuple[str, ...] = ()  # devices (Dynamic Resource Allocation) asked and free per domain


def find_groups(scheduler: GangScheduler, name: str) -> list[str]:
    """Gangs named NAME ("ns/name"): the PodGroup itself, or the gangs of the workload NAME."""
    groups = scheduler.lookup.groups()
    if name in groups:
        return [name]
    wanted = GroupKey.parse(name)
    out = []
    for g in groups:
        key = GroupKey.parse(g)
        if key.namespace != wanted.namespace:
            continue
        view = scheduler.lookup.view(g)
        owner = view.owner  # the workload a derived gang comes from
        if (
            (owner is not None and owner.name == wanted.name)
            or key.name.endswith(f"-{wanted.name}")
            or _owned_by(scheduler, view.pods, wanted.name)
        ):
            out.append(g)
    return sorted(out)


def _owned_by(scheduler: GangScheduler, pods: Iterable[str], name: str) -> bool:
    """Whether a pod's controller is NAME (a scheduling.k8s.io PodGroup its Job's controller made)."""
    first = next(iter(pods), None)
    pod = scheduler.state.pods.get(first) if first is not None else None
    controller = pod.controller if pod is not None else None
    return controller is not None and controller.name == name


def explain(scheduler: GangScheduler, group: str) -> Explanation:
    view = scheduler.lookup.view(group)
    status = scheduler.status(group)
    notes = [*view.warnings, *(f"{pod}: {why}" for pod, why in sorted(view.waiting.items()))]
    notes += _gated(scheduler, view.pods)
    gang = view.built.gang if view.built is not None else None
    repaired = scheduler.repairs.last_text(group)
    if gang is None or not view.valid:
        return Explanation(group, view.source, status.phase, status.message, notes=tuple(notes), last_repair=repaired)
    state = scheduler.state
    tree = state.table.tree(gang.topology)
    reserved = scheduler.reserved(group)
    node_of = {k: p.node_name for k in view.pods if (p := state.pods.get(k)) is not None and p.node_name}
    planned_on = {**reserved, **node_of}
    lines = _lines(gang.root, 0, tree, state.table.index, planned_on, set(node_of))
    base = Explanation(
        group,
        view.source,
        status.phase,
        status.message,
        f"{gang.topology.name or '(none)'}: {gang.topology.describe()}",
        tuple(lines),
        notes=tuple(notes),
        last_repair=repaired,
        reservation=scheduler.reserving.text(group),
    )
    if all(m.key in node_of for m in gang.members()):
        return replace(base, outcome="nothing to plan: every pod is bound")
    # The dry run: this gang's own reservations go back; its bound pods stay where they are.
    give_back: dict[str, Counter[str]] = {}
    for pod_key, node in reserved.items():
        give_back.setdefault(node, Counter()).update(state.pods[pod_key].requests)
    snapshot = state.snapshot(give_back, nominated_room(state, scheduler.membership, group))
    result = plan(snapshot, gang)
    preemption = _preemption(scheduler, group, None if isinstance(result, Plan) else result)
    if isinstance(result, Plan):
        levels = "; ".join(f"{lv} {', '.join(d)}" for lv, d in result.levels.items() if d)
        extra = f"; {len(result.unplaced)} optional pod(s) would not fit" if result.unplaced else ""
        outcome = f"fits: {len(result.assignments)} pod(s) would be placed ({levels}){extra}"
        headline = "not planned yet, and it fits now: kube-scheduler has not sent its pods since"
    else:
        assert isinstance(result, Unplaceable)
        outcome = f"does not fit: {result.message}"
        headline = outcome
    shapes = {s.describe(): left_out(snapshot, s) for s in gang.shapes}
    # A complete gang this scheduler never tried (always so for `explain` on a live cluster,
    # whose cache is fresh) would say "waiting to be planned": the dry run knows better.
    message = replace(status, said=(Headline(headline),)).message if status.reason == R_WAITING else status.message
    left = {k: v for k, v in shapes.items() if v}
    devices = device_lines(state, gang, snapshot, tree)
    return replace(base, message=message, outcome=outcome, left_out=left, preemption=preemption, devices=devices)


def _preemption(scheduler: GangScheduler, group: str, refused: Unplaceable | None) -> tuple[str, ...]:
    """The preemption under way for GROUP; else, when it does not fit (REFUSED), what one would do now."""
    nom = scheduler.preempting.nomination(group)
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
) -> list[ScopeLine]:
    members = [m.key for m in scope.all_members()]
    placed = [planned_on[k] for k in members if k in planned_on]
    if scope.leaf:
        minimum = f"{scope.min_member} pod{'s' if scope.min_member != 1 else ''}"
    else:
        minimum = f"{scope.min_member} of {sum(c.weight for c in scope.children)} SubGroups"
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
        len(members),
        len(placed),
        sum(1 for k in members if k in bound),
        where,
    )
    out = [line]
    for child in scope.children:
        out.extend(_lines(child, depth + 1, tree, index, planned_on, bound))
    return out


def render(explanations: Sequence[Explanation]) -> str:
    out: list[str] = []
    for e in explanations:
        out.append(f"{e.group}  ({e.source or 'no source'})  {e.phase}")
        out.append(f"  {e.message}")
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
        for device_line in e.devices:
            out.append(f"  Devices: {device_line}")
        for shape, reasons in e.left_out.items():
            texts = sorted(((str(why), n) for why, n in reasons.items()), key=lambda kv: (-kv[1], kv[0]))
            shown = ", ".join(f"{n} {why}" for why, n in texts)
            out.append(f"  Nodes left out for pods of {shape}: {shown}")
        for i, text in enumerate(e.preemption):
            out.append(f"  {'Preemption: ' if i == 0 else '    '}{text}")
        if e.last_repair:
            out.append(f"  Last repair: {e.last_repair}")
        if e.reservation:
            out.append(f"  Reservation: {e.reservation}")
        for note in e.notes:
            out.append(f"  Note: {note}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"
