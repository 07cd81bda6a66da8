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

from extender.grouping import names as n
from extender.grouping.annotations import Layer, Layout, layout_of, merge, placement
from extender.grouping.draft import GangDraft, Member, Part
from extender.grouping.types import Grouping, SegmentPosition
from extender.grouping.values import label_field, pod_index
from extender.model.errors import ErrorList, FieldError
from extender.model.podgroup import PodGroupSpec, SubGroupSpec, TopologyConstraint, validate_structure

__all__ = ["GangDraft", "Member", "Part", "assemble"]


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
            out.append(SubGroupSpec(name, parent, min_member=(b - a) if a < minimum else 0))
        if layer.constraint is not None:
            constraints[name] = layer.constraint
        if rest:
            _segment_subgroups(name, name, (a, b), rest, minimum, out, constraints)
    return count


def assemble(draft: GangDraft, members: Iterable[Member]) -> Grouping:
    """The Grouping of one gang: its PodGroup tree from the draft, and where each pod goes."""
    errors = list(draft.errors)
    warnings = list(draft.warnings)
    ann = draft.annotations
    topology = ann.get(n.KAI_TOPOLOGY) or None
    workload = placement(ann, draft.obj, "", None, errors, kueue_too=False)
    global_constraint = merge(draft.global_constraint, workload, draft.obj, errors)

    subgroups: list[SubGroupSpec] = list(draft.parents)
    constraints: dict[str, TopologyConstraint] = dict(draft.constraints)
    layouts: dict[str, Layout] = {}
    placed_targets: set[str] = set()
    for part in draft.parts:
        obj = part.template_obj or draft.obj
        target = part.target or part.name
        own_topology = part.template.get(n.KAI_TOPOLOGY) or None
        c = placement(part.template, obj, part.where, own_topology, errors)
        if c is not None and target not in placed_targets:
            constraints[target] = merge(constraints.get(target), c, obj, errors) or c
        placed_targets.add(target)
        layout = layout_of(part, obj, topology, errors, warnings)
        layouts[part.name] = layout
        if layout.layers:
            seg: list[SubGroupSpec] = []
            prefix = f"{part.name}-{layout.word}"
            span = (0, part.replicas)
            count = _segment_subgroups(part.name, prefix, span, layout.layers, part.minimum, seg, constraints)
            subgroups.append(SubGroupSpec(part.name, part.parent, min_subgroup=count))
            subgroups.extend(seg)
        else:
            subgroups.append(SubGroupSpec(part.name, part.parent, min_member=part.minimum))

    subgroup_of: dict[str, str] = {}
    order: dict[str, int] = {}
    segments: dict[str, SegmentPosition] = {}
    for m in members:
        if m.error is not None:
            errors.append(m.error)
            continue
        if m.part is None:
            continue  # claimed by a group that is Invalid anyway
        found = layouts.get(m.part)
        if found is None:
            have = ", ".join(layouts)
            errors.append(
                FieldError(
                    f"Pod {m.pod.key}", "metadata.labels", f"belongs to no part of {draft.source} (have: {have})"
                )
            )
            continue
        layout = found
        index: int | None = None
        if layout.index_label is not None:
            index, err = pod_index(m.pod, layout.index_label, layout.offset)
            if index is not None:
                order[m.pod.key] = index
            elif layout.layers and err is not None:
                errors.append(err)
                continue
        if not layout.layers:
            subgroup_of[m.pod.key] = layout.part.name
            continue
        assert index is not None
        assert layout.index_label is not None
        if index >= layout.part.replicas:
            raw = m.pod.labels.get(layout.index_label, "")
            shifted = f" (index {index} after subtracting {layout.offset})" if layout.offset else ""
            msg = f"{raw!r}{shifted} is outside the replica range 0..{layout.part.replicas - 1} of {layout.part.name}"
            errors.append(FieldError(f"Pod {m.pod.key}", label_field(layout.index_label), msg))
            continue
        subgroup_of[m.pod.key] = layout.leaf(index)
        segments[m.pod.key] = layout.position(index)

    top = [s for s in subgroups if s.parent is None]
    namespace, _, name = draft.key.partition("/")
    pg = PodGroupSpec(
        namespace=namespace,
        name=name,
        min_subgroup=(draft.root_min if draft.root_min is not None else len(top)) if subgroups else None,
        subgroups=tuple(subgroups),
        global_constraint=global_constraint,
        subgroup_constraints=constraints,
        uid=draft.uid,
        annotations={n.KAI_TOPOLOGY: topology} if topology else {},
    )
    structure = ErrorList(f"PodGroup {draft.key}")
    validate_structure(pg, structure)
    errors.extend(structure.errors)
    unique_errors = tuple(dict.fromkeys(errors))
    return Grouping(
        key=draft.key,
        podgroup=None if unique_errors else pg,
        subgroup_of=subgroup_of,
        order=order,
        segments=segments,
        owner=draft.owner,
        errors=unique_errors,
        warnings=tuple(dict.fromkeys(warnings)),
        source=draft.source,
    )
