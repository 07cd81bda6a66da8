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

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from extender.grouping import names as n
from extender.grouping.types import Grouping
from extender.grouping.values import ann_field, label_field, level, pod_index, positive_int
from extender.model.errors import ErrorList, FieldError
from extender.model.pod import OwnerRef, PodInfo
from extender.model.podgroup import PodGroupSpec, SubGroupSpec, TopologyConstraint, validate_structure


@dataclass(frozen=True)
class Part:
    """One replica type of a workload, read from its spec."""

    name: str  # the SubGroup name
    replicas: int
    minimum: int
    template: Mapping[str, str] = field(default_factory=dict)  # the PodTemplate's annotations
    where: str = ""  # the PodTemplate's field path ("" when the annotations come from a pod)
    template_obj: str | None = None  # whose field `where` is (default: the workload)
    index_label: str | None = None  # the kind's default index label
    index_offset: int = 0  # subtracted from the default index label (LWS leaders)
    parent: str | None = None
    target: str | None = None  # the SubGroup the template's own placement goes to (default: this one)
    slice_default: int | None = None  # Kueue podset-slice-size when not written (JobSet: parallelism)


@dataclass
class GangDraft:
    """One PodGroup as a grouper sees it before pods join."""

    key: str
    source: str
    obj: str  # FieldError.obj for the workload's own fields: "TFJob ml/train"
    owner: OwnerRef | None
    annotations: Mapping[str, str] = field(default_factory=dict)  # the workload's own annotations
    parts: list[Part] = field(default_factory=list)
    parents: list[SubGroupSpec] = field(default_factory=list)  # SubGroups above parts (JobSet)
    constraints: dict[str, TopologyConstraint] = field(default_factory=dict)  # set by the grouper
    global_constraint: TopologyConstraint | None = None  # set by the grouper (LWS exclusive)
    root_min: int | None = None  # default: every top-level SubGroup
    errors: list[FieldError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    uid: str = ""


@dataclass(frozen=True)
class Member:
    """A pod a grouper claimed for a gang: its part, or the error that keeps it from one."""

    pod: PodInfo
    part: str | None
    error: FieldError | None = None


@dataclass(frozen=True)
class _Layer:
    size: int
    constraint: TopologyConstraint | None


@dataclass(frozen=True)
class _Layout:
    part: Part
    word: str = ""  # "seg" or "slice"; "" when the part is not segmented
    layers: tuple[_Layer, ...] = ()
    index_label: str | None = None
    offset: int = 0

    def leaf(self, index: int) -> str:
        name, lo, hi = f"{self.part.name}-{self.word}", 0, self.part.replicas
        for layer in self.layers:
            k = (index - lo) // layer.size
            name = f"{name}-{k}"
            lo = lo + k * layer.size
            hi = min(lo + layer.size, hi)
        return name


def anns_field(where: str, annotations: Iterable[str]) -> str:
    names = list(dict.fromkeys(annotations))
    if len(names) == 1:
        return ann_field(where, names[0])
    inner = ", ".join(names)
    return f"{where}.metadata.annotations[{inner}]" if where else f"metadata.annotations[{inner}]"


def merge(
    a: TopologyConstraint | None, b: TopologyConstraint | None, obj: str, errors: list[FieldError]
) -> TopologyConstraint | None:
    """Two constraints on one scope; the same attribute set to two levels is an error."""
    if a is None or (a.empty and not a.topology):
        return b
    if b is None or (b.empty and not b.topology):
        return a
    for attr in ("required", "preferred", "topology"):
        x, y = getattr(a, attr), getattr(b, attr)
        if x and y and x != y:
            errors.append(FieldError(obj, b.field, f"{attr} {y!r} conflicts with {x!r} from {a.field}"))
    return TopologyConstraint(
        required=a.required or b.required,
        preferred=a.preferred or b.preferred,
        topology=a.topology or b.topology,
        field=a.field if a.required or not b.required else b.field,
        exclusive=a.exclusive or b.exclusive,
    )


def _placement(
    ann: Mapping[str, str],
    obj: str,
    where: str,
    topology: str | None,
    errors: list[FieldError],
    kueue_too: bool = True,
) -> TopologyConstraint | None:
    """The scope's own constraint from KAI's (and, on PodTemplates, Kueue's) placement annotations."""
    used: list[str] = []

    def read(annotation: str) -> str | None:
        value = level(ann.get(annotation), obj, ann_field(where, annotation), errors)
        if value is not None:
            used.append(annotation)
        return value

    required, preferred = read(n.KAI_REQUIRED), read(n.KAI_PREFERRED)
    if not kueue_too:
        return _constraint(required, preferred, topology, where, used)
    kueue = [a for a in (n.KUEUE_REQUIRED, n.KUEUE_PREFERRED, n.KUEUE_UNCONSTRAINED) if a in ann]
    if len(kueue) > 1:
        errors.append(FieldError(obj, ann_field(where, kueue[1]), f"set only one of {', '.join(kueue)}"))
    for kai_value, annotation in ((required, n.KUEUE_REQUIRED), (preferred, n.KUEUE_PREFERRED)):
        value = read(annotation)
        if value is not None and kai_value is not None and value != kai_value:
            other = n.KAI_REQUIRED if annotation == n.KUEUE_REQUIRED else n.KAI_PREFERRED
            errors.append(
                FieldError(obj, ann_field(where, annotation), f"{value!r} conflicts with {other}={kai_value!r}")
            )
        if value is not None and annotation == n.KUEUE_REQUIRED:
            required = value
        elif value is not None:
            preferred = value
    unconstrained = ann.get(n.KUEUE_UNCONSTRAINED)
    if unconstrained is not None and unconstrained not in ("true", "false"):
        msg = f"expected true or false, got {unconstrained!r}"
        errors.append(FieldError(obj, ann_field(where, n.KUEUE_UNCONSTRAINED), msg))
    return _constraint(required, preferred, topology, where, used)


def _constraint(
    required: str | None, preferred: str | None, topology: str | None, where: str, used: list[str]
) -> TopologyConstraint | None:
    if required is None and preferred is None:
        return None
    return TopologyConstraint(required=required, preferred=preferred, topology=topology, field=anns_field(where, used))


def _kai_segments(
    part: Part, obj: str, topology: str | None, index_label: str, offset: int, errors: list[FieldError]
) -> _Layout | None:
    ann, where = part.template, part.where
    size = positive_int(ann.get(n.KAI_SEGMENT_SIZE), obj, ann_field(where, n.KAI_SEGMENT_SIZE), errors)
    required = level(ann.get(n.KAI_SEGMENT_REQUIRED), obj, ann_field(where, n.KAI_SEGMENT_REQUIRED), errors)
    preferred = level(ann.get(n.KAI_SEGMENT_PREFERRED), obj, ann_field(where, n.KAI_SEGMENT_PREFERRED), errors)
    if n.KAI_SEGMENT_SIZE not in ann:
        first = next(a for a in n.KAI_SEGMENT_ANNOTATIONS if a in ann)
        errors.append(
            FieldError(obj, ann_field(where, first), f"{ann[first]!r} needs {n.KAI_SEGMENT_SIZE} to cut segments")
        )
        return None
    if size is None:
        return None
    used = [a for a in (n.KAI_SEGMENT_REQUIRED, n.KAI_SEGMENT_PREFERRED) if a in ann]
    c = None
    if required or preferred:
        c = TopologyConstraint(required=required, preferred=preferred, topology=topology, field=anns_field(where, used))
    return _Layout(part, "seg", (_Layer(size, c),), index_label, offset)


def _kueue_slices(part: Part, obj: str, index_label: str, offset: int, errors: list[FieldError]) -> _Layout | None:
    ann, where = part.template, part.where
    before = len(errors)
    layers: list[_Layer] = []
    if n.KUEUE_SLICE_CONSTRAINTS in ann:
        field_ = ann_field(where, n.KUEUE_SLICE_CONSTRAINTS)
        for other in (n.KUEUE_SLICE_REQUIRED, n.KUEUE_SLICE_SIZE):
            if other in ann:
                errors.append(
                    FieldError(obj, ann_field(where, other), f"cannot be combined with {n.KUEUE_SLICE_CONSTRAINTS}")
                )
        text = ann[n.KUEUE_SLICE_CONSTRAINTS]
        try:
            raw = json.loads(text)
        except ValueError as exc:
            errors.append(
                FieldError(obj, field_, f"expected a JSON list of {{topology, size}} layers, got {text!r} ({exc})")
            )
            return None
        if not isinstance(raw, list) or not 1 <= len(raw) <= n.KUEUE_MAX_LAYERS:
            errors.append(
                FieldError(obj, field_, f"expected a JSON list of 1 to {n.KUEUE_MAX_LAYERS} layers, got {text!r}")
            )
            return None
        for i, item in enumerate(raw):
            where_i = f"{field_}[{i}]"
            if not isinstance(item, Mapping):
                errors.append(FieldError(obj, where_i, f"expected an object {{topology, size}}, got {item!r}"))
                continue
            topo = item.get("topology")
            lv = level(topo if isinstance(topo, str) else None, obj, f"{where_i}.topology", errors)
            if not isinstance(topo, str):
                errors.append(FieldError(obj, f"{where_i}.topology", f"expected a node label, got {topo!r}"))
            size = positive_int(item.get("size"), obj, f"{where_i}.size", errors)
            if item.get("size") is None:
                errors.append(FieldError(obj, f"{where_i}.size", "missing: each layer needs a size"))
            if lv is not None and size is not None:
                layers.append(_Layer(size, TopologyConstraint(required=lv, field=f"{field_}[{i}]")))
        if len(errors) > before:
            return None
        above, above_name = part.replicas, f"the {part.replicas} replicas of {part.name}"
        for i, layer in enumerate(layers):
            if above and above % layer.size:
                msg = f"size {layer.size} does not divide {above_name}"
                errors.append(FieldError(obj, f"{field_}[{i}].size", msg))
            above, above_name = layer.size, f"the size {layer.size} of layer {i}"
    else:
        f_req, f_size = ann_field(where, n.KUEUE_SLICE_REQUIRED), ann_field(where, n.KUEUE_SLICE_SIZE)
        required = level(ann.get(n.KUEUE_SLICE_REQUIRED), obj, f_req, errors)
        size = positive_int(ann.get(n.KUEUE_SLICE_SIZE), obj, f_size, errors)
        if n.KUEUE_SLICE_REQUIRED not in ann:
            errors.append(FieldError(obj, f_size, f"{ann[n.KUEUE_SLICE_SIZE]!r} needs {n.KUEUE_SLICE_REQUIRED}"))
        elif n.KUEUE_SLICE_SIZE not in ann:
            size = part.slice_default
            if size is None:
                errors.append(FieldError(obj, f_req, f"{ann[n.KUEUE_SLICE_REQUIRED]!r} needs {n.KUEUE_SLICE_SIZE}"))
        if size is not None and part.replicas and part.replicas % size:
            msg = f"{size} does not divide the {part.replicas} replicas of {part.name}"
            errors.append(FieldError(obj, f_size, msg))
        if len(errors) > before or required is None or size is None:
            return None
        layers.append(_Layer(size, TopologyConstraint(required=required, field=f_req)))
    if len(errors) > before:
        return None
    return _Layout(part, "slice", tuple(layers), index_label, offset)


def _layout(
    part: Part, obj: str, workload_topology: str | None, errors: list[FieldError], warnings: list[str]
) -> _Layout:
    """How a part is cut into segments or slices, if at all; the warnings say what was ignored."""
    ann, where = part.template, part.where
    custom = ann.get(n.KAI_POD_INDEX_LABEL)
    if custom is not None and not custom.strip():
        errors.append(
            FieldError(obj, ann_field(where, n.KAI_POD_INDEX_LABEL), f"expected a label name, got {custom!r}")
        )
        custom = None
    index_label = custom or part.index_label
    offset = part.index_offset if custom in (None, part.index_label) else 0
    plain = _Layout(part, index_label=index_label, offset=offset)
    kai = [a for a in n.KAI_SEGMENT_ANNOTATIONS if a in ann]
    kueue = [a for a in (n.KUEUE_SLICE_REQUIRED, n.KUEUE_SLICE_SIZE, n.KUEUE_SLICE_CONSTRAINTS) if a in ann]
    if not kai and not kueue:
        return plain
    at = f"{obj} {where}" if where else obj
    if kai and kueue:
        msg = f"set either KAI segments ({', '.join(kai)}) or Kueue slices ({', '.join(kueue)}), not both"
        errors.append(FieldError(obj, ann_field(where, kueue[0]), msg))
        return plain
    written = ", ".join(kai or kueue)
    topology = ann.get(n.KAI_TOPOLOGY) or workload_topology
    if kai and not topology:
        warnings.append(f"{at}: {written} ignored: no {n.KAI_TOPOLOGY} annotation on the PodTemplate or the workload")
        return plain
    if index_label is None:
        warnings.append(
            f"{at}: {written} ignored: this kind has no default pod index label; set {n.KAI_POD_INDEX_LABEL}"
        )
        return plain
    if part.replicas == 0:
        return plain
    own_topology = ann.get(n.KAI_TOPOLOGY) or None
    if kai:
        return _kai_segments(part, obj, own_topology, index_label, offset, errors) or plain
    return _kueue_slices(part, obj, index_label, offset, errors) or plain


def _segment_subgroups(
    parent: str,
    prefix: str,
    span: tuple[int, int],
    layers: tuple[_Layer, ...],
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
    workload = _placement(ann, draft.obj, "", None, errors, kueue_too=False)
    global_constraint = merge(draft.global_constraint, workload, draft.obj, errors)

    subgroups: list[SubGroupSpec] = list(draft.parents)
    constraints: dict[str, TopologyConstraint] = dict(draft.constraints)
    layouts: dict[str, _Layout] = {}
    placed_targets: set[str] = set()
    for part in draft.parts:
        obj = part.template_obj or draft.obj
        target = part.target or part.name
        own_topology = part.template.get(n.KAI_TOPOLOGY) or None
        c = _placement(part.template, obj, part.where, own_topology, errors)
        if c is not None and target not in placed_targets:
            constraints[target] = merge(constraints.get(target), c, obj, errors) or c
        placed_targets.add(target)
        layout = _layout(part, obj, topology, errors, warnings)
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
        owner=draft.owner,
        errors=unique_errors,
        warnings=tuple(dict.fromkeys(warnings)),
        source=draft.source,
    )
