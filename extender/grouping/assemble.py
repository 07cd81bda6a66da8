"""From a grouper's draft (replica types read from the owner's spec) to a Grouping.

A grouper describes a workload as `Part`s, one per replica type (or per Job of a JobSet, per
worker group of a RayCluster...), each with its replica count, its minimum and its PodTemplate's
annotations. `assemble` turns that into the PodGroup tree, the same way for every kind:

    PodGroup <key>                 global constraint: the workload's kai.scheduler/topology-*-placement
    ├── <part>                     the PodTemplate's placement (KAI or Kueue podset-* annotations)
    │   ├── <part>-seg-0           segments (kai.scheduler/segment-*), or slices (Kueue podset-slice-*)
    │   └── <part>-seg-1           named <part>-slice-<k>[-<j>[-<i>]], one name part per layer
    └── <other part>

Segment k covers pod indexes [k*size, (k+1)*size); it is mandatory (minMember = its pod count)
when it starts below the part's minimum, elastic (minMember 0) otherwise; the part's own minimum
is then the number of its segments. A pod joins segment floor(index / size).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from extender.grouping import names as n
from extender.grouping.annotations import Layer, Layout, anns_field, layout_of, merge, placement
from extender.grouping.grouper import ClaimedPod, GangDraft, Part
from extender.grouping.result import Grouping, LeaderFirst, SegmentPosition
from extender.grouping.values import annotation_keys, label_field, pod_index
from extender.model.annotation_keys import MOVABLE
from extender.model.errors import ErrorList, FieldError, said_once, said_once_text
from extender.model.labels import ON_UNREPAIRABLE
from extender.model.limits import MAX_GANG_PODS, MAX_SUBGROUPS, beyond
from extender.model.max_wait import MAX_WAIT_ANNOTATION, max_wait
from extender.model.podgroup import PodGroupSpec, SubGroupSet, SubGroupSpec, TopologyConstraint, validate_structure

__all__ = ["assemble"]


def _segment_subgroups(
    parent: str,
    prefix: str,
    span: tuple[int, int],
    layers: tuple[Layer, ...],
    minimum: int,
    out: list[SubGroupSpec],
    constraints: dict[str, TopologyConstraint],
) -> int:
    """Append the SubGroups of one segmentation layer below `parent`; return how many."""
    layer, rest = layers[0], layers[1:]
    lo, hi = span
    count = -(-(hi - lo) // layer.size)
    for k in range(count):
        a, b = lo + k * layer.size, min(lo + (k + 1) * layer.size, hi)
        name = f"{prefix}-{k}"
        if rest:
            inner = -(-(b - a) // rest[0].size)
            out.append(SubGroupSpec(name, parent, min_subgroup=inner))
        else:
            out.append(SubGroupSpec(name, parent, min_member=(b - a) if a < minimum else 0, segment_pods=b - a))
        if layer.constraint is not None:
            constraints[name] = layer.constraint
        if rest:
            _segment_subgroups(name, name, (a, b), rest, minimum, out, constraints)
    return count


@dataclass
class _Tree:
    """The PodGroup tree being built for one gang, and what goes wrong on the way."""

    errors: list[FieldError]
    warnings: list[str]
    subgroups: list[SubGroupSpec] = field(default_factory=list)
    constraints: dict[str, TopologyConstraint] = field(default_factory=dict)
    layouts: dict[str, Layout] = field(default_factory=dict)  # part name -> its segment layout


def _keys(draft: GangDraft, members: Iterable[ClaimedPod], tree: _Tree) -> None:
    """The annotation keys the user wrote, each object once (a JobSet's Jobs share one template):
    the workload's, and its templates' or, where the pods carry their own, the pods'."""
    seen: set[tuple[str, str]] = set()
    written = [(draft.obj, "", draft.annotations)]
    if draft.keys_on_pods:
        written += [(f"Pod {m.pod.key}", "", m.pod.annotations) for m in members]
    else:
        written += [(p.template_obj or draft.obj, p.where, p.template) for p in draft.parts]
    for obj, where, ann in written:
        if (obj, where) not in seen:
            seen.add((obj, where))
            annotation_keys(ann, obj, where, tree.errors, tree.warnings)


def _checks(draft: GangDraft, tree: _Tree) -> bool:
    """The workload-wide checks: segment annotations on the workload itself (KAI and Kueue read
    them from PodTemplates only: say so rather than drop them), and the gang's size; True when
    the gang has more pods than MAX_GANG_PODS."""
    stray = [
        a for a in (*n.KAI_SEGMENT_ANNOTATIONS, n.KUEUE_SLICE_SIZE, n.KUEUE_SLICE_REQUIRED) if a in draft.annotations
    ]
    if stray:
        where = "segments and slices are cut per replica type: put them on its PodTemplate"
        tree.warnings.append(f"{draft.obj}: {anns_field('', stray)} ignored: {where}")
    total = sum(p.replicas for p in draft.parts)
    if total > MAX_GANG_PODS:
        tree.errors.append(FieldError(draft.obj, "spec", f"the gang has {total:,} pods; {beyond(MAX_GANG_PODS)}"))
    return total > MAX_GANG_PODS


def _add_parts(draft: GangDraft, topology: str | None, tree: _Tree, oversized: bool) -> None:
    """One SubGroup per part, with its placement, and its segment SubGroups below it (none for
    an oversized gang)."""
    placed_targets: set[str] = set()
    for part in draft.parts:
        obj = part.template_obj or draft.obj
        target = part.target or part.name
        own_topology = part.template.get(n.KAI_TOPOLOGY) or None
        shared = part.template
        if part.kueue_own:  # Kueue assigns each Job of a JobSet's replicated Job on its own
            shared = {k: v for k, v in part.template.items() if k not in n.KUEUE_PLACEMENT}
            own = {k: v for k, v in part.template.items() if k in n.KUEUE_PLACEMENT}
            c = placement(own, obj, part.where, own_topology, tree.errors)
            if c is not None:
                tree.constraints[part.name] = merge(tree.constraints.get(part.name), c, obj, tree.errors) or c
        c = placement(shared, obj, part.where, own_topology, tree.errors)
        if c is not None and target not in placed_targets:
            tree.constraints[target] = merge(tree.constraints.get(target), c, obj, tree.errors) or c
        placed_targets.add(target)
        layout = layout_of(part, obj, topology, tree.errors, tree.warnings)
        if oversized:  # no segments cut: they would take memory for a gang that is Invalid anyway
            layout = Layout(part, index_label=layout.index_label, offset=layout.offset)
        tree.layouts[part.name] = layout
        if layout.layers:
            seg: list[SubGroupSpec] = []
            prefix = f"{part.name}-{layout.word}"
            span = (0, part.replicas)
            count = _segment_subgroups(part.name, prefix, span, layout.layers, part.minimum, seg, tree.constraints)
            tree.subgroups.append(SubGroupSpec(part.name, part.parent, min_subgroup=count))
            tree.subgroups.extend(seg)
        else:
            tree.subgroups.append(SubGroupSpec(part.name, part.parent, min_member=part.minimum))


def _podset_groups(draft: GangDraft, tree: _Tree) -> tuple[SubGroupSet, ...]:
    """Kueue's PodSet groups: the parts whose templates share a podset-group-name become one
    SubGroupSet under their constraint (which, as in Kueue, they must agree on). A JobSet's
    PodSet is a replicated Job: its Jobs (parts assigned on their own) join the set as the
    replicated Job's SubGroup, their target, so that a leader Job and a workers Job share one
    domain as an LWS leader and its workers do."""
    groups: dict[str, list[Part]] = {}
    for part in draft.parts:
        name = part.template.get(n.KUEUE_PODSET_GROUP)
        if name:
            groups.setdefault(name, []).append(part)
    sets = []
    for name, parts in groups.items():
        members = list(dict.fromkeys((p.target or p.name) if p.kueue_own else p.name for p in parts))
        if len(members) < 2:
            continue
        constraint: TopologyConstraint | None = None
        for part in parts:
            own = tree.constraints.get(part.name)
            constraint = merge(constraint, own, part.template_obj or draft.obj, tree.errors)
        names = ", ".join(members)
        if constraint is None or constraint.empty:
            tree.warnings.append(f"{draft.obj}: {n.KUEUE_PODSET_GROUP}={name} ({names}) ignored: no topology request")
            continue
        sets.append(SubGroupSet(tuple(members), constraint))
    return tuple(sets)


def _leaf_of(
    m: ClaimedPod, source: str, tree: _Tree, order: dict[str, int]
) -> tuple[str, SegmentPosition | None] | None:
    """The leaf SubGroup a claimed pod joins and its segment position when its part is segmented
    (its index recorded in `order`); None: an error."""
    if m.error is not None:
        tree.errors.append(m.error)
        return None
    if m.part is None:
        return None  # claimed by a group that is Invalid anyway
    layout = tree.layouts.get(m.part)
    if layout is None:
        have = ", ".join(tree.layouts)
        msg = f"belongs to no part of {source} (have: {have})"
        tree.errors.append(FieldError(f"Pod {m.pod.key}", "metadata.labels", msg))
        return None
    index: int | None = None
    if layout.index_label is not None:
        index, err = pod_index(m.pod, layout.index_label, layout.offset)
        if index is not None:
            order[m.pod.key] = index
        elif layout.layers and err is not None:
            tree.errors.append(err)
            return None
    if not layout.layers:
        return layout.part.name, None
    assert index is not None
    assert layout.index_label is not None
    if index >= layout.part.replicas:
        raw = m.pod.labels.get(layout.index_label, "")
        shifted = f" (index {index} after subtracting {layout.offset})" if layout.offset else ""
        msg = f"{raw!r}{shifted} is outside the replica range 0..{layout.part.replicas - 1} of {layout.part.name}"
        tree.errors.append(FieldError(f"Pod {m.pod.key}", label_field(layout.index_label), msg))
        return None
    return layout.leaf(index), layout.position(index)


def _leader_first(draft: GangDraft, tree: _Tree) -> dict[str, LeaderFirst]:
    """The parts whose followers are created only once their leader is scheduled, with the leaf
    SubGroup of each pod index of their minimum (a follower not created yet joins it)."""
    out = {}
    for part in draft.parts:
        layout = tree.layouts.get(part.name)
        if not part.leader_first or layout is None or layout.index_label is None or layout.offset:
            continue
        count = min(part.minimum, part.replicas)
        leaves = tuple(layout.leaf(i) if layout.layers else part.name for i in range(count))
        out[part.name] = LeaderFirst(layout.index_label, leaves)
    return out


def assemble(draft: GangDraft, members: Iterable[ClaimedPod]) -> Grouping:
    """The Grouping of one gang: its PodGroup tree from the draft, and where each pod goes."""
    members = list(members)
    tree = _Tree(list(draft.errors), list(draft.warnings), list(draft.parents), dict(draft.constraints))
    _keys(draft, members, tree)
    ann = draft.annotations
    topology = ann.get(n.KAI_TOPOLOGY) or None
    # Kueue's names on the workload's metadata constrain it whole, as KAI's do: for a Job, its
    # only PodSet.
    workload = placement(ann, draft.obj, "", None, tree.errors)
    global_constraint = merge(draft.global_constraint, workload, draft.obj, tree.errors)
    _add_parts(draft, topology, tree, _checks(draft, tree))
    podset_groups = _podset_groups(draft, tree)

    subgroup_of: dict[str, str] = {}
    order: dict[str, int] = {}
    segments: dict[str, SegmentPosition] = {}
    for m in members:
        joined = _leaf_of(m, draft.source, tree, order)
        if joined is not None:
            subgroup_of[m.pod.key], segment = joined
            if segment is not None:
                segments[m.pod.key] = segment

    subgroups = tree.subgroups
    if len(subgroups) > MAX_SUBGROUPS:
        too_many = f"the gang has {len(subgroups):,} SubGroups; {beyond(MAX_SUBGROUPS)}"
        tree.errors.append(FieldError(draft.obj, "spec", too_many))
    top = [s for s in subgroups if s.parent is None]
    namespace, _, name = draft.key.partition("/")
    wait, bad_wait = max_wait(ann, draft.obj)  # the gang's own policy, read where it was written
    if bad_wait is not None:
        tree.errors.append(bad_wait)
    pg = PodGroupSpec(
        namespace=namespace,
        name=name,
        min_subgroup=(draft.root_min if draft.root_min is not None else len(top)) if subgroups else None,
        subgroups=tuple(subgroups),
        global_constraint=global_constraint,
        subgroup_constraints=tree.constraints,
        subgroup_sets=podset_groups,
        uid=draft.uid,
        annotations={k: ann[k] for k in (n.KAI_TOPOLOGY, ON_UNREPAIRABLE, MAX_WAIT_ANNOTATION, MOVABLE) if ann.get(k)},
        derived_from=draft.obj,
        max_wait=wait,
        priority=draft.priority,
        priority_class_name=draft.priority_class_name,
        disruption_all=draft.disruption_all,
        never_preempts=draft.never_preempts,
    )
    structure = ErrorList(f"PodGroup {draft.key}")
    validate_structure(pg, structure)
    # The tree is topogang's, not the user's: the error names the workload they wrote.
    tree.errors.extend(FieldError(draft.obj, "spec", f"cannot be made one gang: {e.message}") for e in structure.errors)
    unique_errors = said_once(tree.errors)
    return Grouping(
        key=draft.key,
        podgroup=None if unique_errors else pg,
        subgroup_of=subgroup_of,
        order=order,
        segments=segments,
        owner=draft.owner,
        errors=unique_errors,
        warnings=said_once_text(tree.warnings),
        source=draft.source,
        leader_first=_leader_first(draft, tree),
    )
