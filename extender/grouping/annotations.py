"""Reading a scope's placement and segmentation from KAI's and Kueue's annotations.

On the workload: kai.scheduler/topology (which Topology), topology-required-placement and
topology-preferred-placement (the PodGroup's global constraint). On a PodTemplate: the same (the
replica type's SubGroup; its kai.scheduler/topology wins over the workload's), Kueue's
podset-required/preferred/unconstrained-topology, and either KAI segments
(segment-size, segment-topology-*-placement, pod-index-label) or Kueue slices
(podset-slice-required-topology + podset-slice-size, or the layered
podset-slice-required-topology-constraints JSON), never both.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from extender.grouping import names as n
from extender.grouping.grouper import Part
from extender.grouping.result import SegmentPosition
from extender.grouping.values import ann_field, level, positive_int
from extender.model.errors import FieldError
from extender.model.limits import MAX_SEGMENTS, beyond
from extender.model.podgroup import TopologyConstraint

_LAYER_FIELDS = frozenset({"topology", "size"})  # of a podset-slice-required-topology-constraints layer


@dataclass(frozen=True)
class Layer:
    size: int
    constraint: TopologyConstraint | None


@dataclass(frozen=True)
class Layout:
    part: Part
    word: str = ""  # "seg" or "slice"; "" when the part is not segmented
    layers: tuple[Layer, ...] = ()
    index_label: str | None = None
    offset: int = 0

    def leaf(self, index: int) -> str:
        """The leaf segment of pod `index`: one name part per layer, counted inside the one above."""
        name, lo = f"{self.part.name}-{self.word}", 0
        for layer in self.layers:
            k = (index - lo) // layer.size
            name = f"{name}-{k}"
            lo += k * layer.size
        return name

    def position(self, index: int) -> SegmentPosition:
        """Pod `index`'s segment in the outermost layer (the one KAI's segment-size cuts)."""
        size = self.layers[0].size
        return SegmentPosition(index // size, size, index % size)


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
    # Each attribute keeps where it was written; both come from one object (a workload and its
    # templates), so the required level's decides which.
    req = a if a.required or not b.required else b
    pref = a if a.preferred else b
    topo = a if a.topology else b
    return TopologyConstraint(
        required=req.required,
        preferred=pref.preferred,
        topology=topo.topology,
        field=req.field,
        exclusive=a.exclusive or b.exclusive,
        more_required=req.more_required,
        required_fields=req.required_fields,
        obj=req.obj or pref.obj,
        preferred_at=pref.preferred_field() if pref.preferred else "",
        topology_at=topo.topology_field() if topo.topology else "",
    )


def placement(
    ann: Mapping[str, str],
    obj: str,
    where: str,
    topology: str | None,
    errors: list[FieldError],
) -> TopologyConstraint | None:
    """The scope's own constraint from KAI's and Kueue's placement annotations, every spelling:
    two spellings of one attribute must agree, and Kueue's required, preferred and
    unconstrained exclude one another."""
    used: list[str] = []
    values: dict[str, tuple[str, str]] = {}  # attribute -> (value, the annotation that set it)
    for annotation, attr in n.PLACEMENT_SPELLINGS:
        value = level(ann.get(annotation), obj, ann_field(where, annotation), errors)
        if value is None:
            continue
        used.append(annotation)
        first = values.setdefault(attr, (value, annotation))
        if first[0] != value:
            msg = f"{value!r} conflicts with {first[1]}={first[0]!r}"
            errors.append(FieldError(obj, ann_field(where, annotation), msg))
    kinds = {attr for a, attr in n.KUEUE_SPELLINGS if a in ann}
    if n.KUEUE_UNCONSTRAINED in ann:
        kinds.add("unconstrained")
    if len(kinds) > 1:
        spelt = [a for a in (*(a for a, _ in n.KUEUE_SPELLINGS), n.KUEUE_UNCONSTRAINED) if a in ann]
        errors.append(FieldError(obj, ann_field(where, spelt[-1]), f"set only one of {', '.join(spelt)}"))
    unconstrained = ann.get(n.KUEUE_UNCONSTRAINED)
    if unconstrained is not None and unconstrained not in n.KUEUE_BOOLEANS:
        msg = f"expected a boolean as Kueue reads one (true, false, 1, 0, t, f, True, FALSE...), got {unconstrained!r}"
        errors.append(FieldError(obj, ann_field(where, n.KUEUE_UNCONSTRAINED), msg))
    required, preferred = values.get("required"), values.get("preferred")
    if required is None and preferred is None:
        return None
    return written(obj, where, used, required, preferred, topology)


def written(
    obj: str,
    where: str,
    used: list[str],
    required: tuple[str, str] | None,
    preferred: tuple[str, str] | None,
    topology: str | None,
) -> TopologyConstraint:
    """A constraint from annotations at `where` of `obj`: REQUIRED and PREFERRED are (level, the
    annotation that set it); the Topology is the template's own kai.scheduler/topology."""
    return TopologyConstraint(
        required=required[0] if required else None,
        preferred=preferred[0] if preferred else None,
        topology=topology,
        field=anns_field(where, used),
        required_fields=(ann_field(where, required[1]),) if required else (),
        obj=obj,
        preferred_at=ann_field(where, preferred[1]) if preferred else "",
        topology_at=ann_field(where, n.KAI_TOPOLOGY) if topology else "",
    )


def _kai_segments(
    part: Part, obj: str, topology: str | None, index_label: str, offset: int, errors: list[FieldError]
) -> Layout | None:
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
    segments = -(-part.replicas // size)
    if segments > MAX_SEGMENTS:
        what = f"cuts the {part.replicas:,} replicas of {part.name} into {segments:,} segments; {beyond(MAX_SEGMENTS)}"
        errors.append(FieldError(obj, ann_field(where, n.KAI_SEGMENT_SIZE), what))
        return None
    used = [a for a in (n.KAI_SEGMENT_REQUIRED, n.KAI_SEGMENT_PREFERRED) if a in ann]
    c = None
    if required or preferred:
        req = (required, n.KAI_SEGMENT_REQUIRED) if required else None
        pref = (preferred, n.KAI_SEGMENT_PREFERRED) if preferred else None
        c = written(obj, where, used, req, pref, topology)
    return Layout(part, "seg", (Layer(size, c),), index_label, offset)


def _kueue_layer(
    item: object,
    where_i: str,
    i: int,
    obj: str,
    levels: dict[str, int],
    errors: list[FieldError],
    warnings: list[str],
) -> Layer | None:
    """Layer I of podset-slice-required-topology-constraints; LEVELS maps each level named so far
    to the first layer naming it."""
    if not isinstance(item, Mapping):
        errors.append(FieldError(obj, where_i, f"expected an object {{topology, size}}, got {item!r}"))
        return None
    topo = item.get("topology")
    lv = level(topo if isinstance(topo, str) else None, obj, f"{where_i}.topology", errors)
    # Kueue's Go decoder drops a field it does not know; a misspelt one is said here.
    for key in sorted(str(k) for k in item if k not in _LAYER_FIELDS):
        warnings.append(f"{obj}: {where_i}.{key} ignored: a layer has only topology and size")
    if lv is not None and levels.setdefault(lv, i) != i:
        msg = f"{lv!r} is layer {levels[lv]}'s topology too: each layer names a different level"
        errors.append(FieldError(obj, f"{where_i}.topology", msg))
    if not isinstance(topo, str):
        errors.append(FieldError(obj, f"{where_i}.topology", f"expected a node label, got {topo!r}"))
    size = positive_int(item.get("size"), obj, f"{where_i}.size", errors)
    if item.get("size") is None:
        errors.append(FieldError(obj, f"{where_i}.size", "missing: each layer needs a size"))
    if lv is None or size is None:
        return None
    at = f"{where_i}.topology"
    return Layer(size, TopologyConstraint(required=lv, field=where_i, required_fields=(at,), obj=obj))


def _kueue_slices(
    part: Part, obj: str, index_label: str, offset: int, errors: list[FieldError], warnings: list[str]
) -> Layout | None:
    ann, where = part.template, part.where
    before = len(errors)
    layers: list[Layer] = []
    levels: dict[str, int] = {}  # a layer's level -> the first layer naming it
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
            layer = _kueue_layer(item, f"{field_}[{i}]", i, obj, levels, errors, warnings)
            if layer is not None:
                layers.append(layer)
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
        layers.append(
            Layer(size, TopologyConstraint(required=required, field=f_req, required_fields=(f_req,), obj=obj))
        )
    if len(errors) > before:
        return None
    slices = sum(-(-part.replicas // layer.size) for layer in layers)
    if slices > MAX_SEGMENTS:
        field_ = ann_field(
            where, next(a for a in (n.KUEUE_SLICE_CONSTRAINTS, n.KUEUE_SLICE_SIZE, n.KUEUE_SLICE_REQUIRED) if a in ann)
        )
        what = f"cuts the {part.replicas:,} replicas of {part.name} into {slices:,} slices; {beyond(MAX_SEGMENTS)}"
        errors.append(FieldError(obj, field_, what))
        return None
    return Layout(part, "slice", tuple(layers), index_label, offset)


def layout_of(
    part: Part, obj: str, workload_topology: str | None, errors: list[FieldError], warnings: list[str]
) -> Layout:
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
    plain = Layout(part, index_label=index_label, offset=offset)
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
    return _kueue_slices(part, obj, index_label, offset, errors, warnings) or plain
