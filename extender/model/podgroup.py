"""PodGroup: a gang of pods with nested SubGroups and topology constraints (KAI's hierarchical PodGroup design).

`minMember` of the PodGroup or of a SubGroup counts its children: its SubGroups where it has
any, else its pods. `minSubGroup` (from `scheduling.run.ai/v2alpha2`) is the same count spelled
for levels with SubGroups. Absent on a level with SubGroups it means all of them; absent on a
level of pods it means one pod. Levels are resolved against a Topology later, when the gang is
built, because that needs the cluster's Topology objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from extender.model import annotation_keys
from extender.model.errors import ErrorList
from extender.model.labels import TOPOLOGY_ANNOTATION
from extender.model.limits import MAX_SUBGROUPS, beyond
from extender.model.max_wait import max_wait
from extender.model.pod import _timestamp
from extender.model.raw import JSON, identify, mapping, opt_bool, opt_int, opt_str, seq, str_map, unknown_fields

PODGROUP_API_VERSIONS = frozenset({"scheduling.topogang.io/v1alpha1", "scheduling.run.ai/v2alpha2"})
KAI_API_VERSION = "scheduling.run.ai/v2alpha2"

# The fields each part of a PodGroup may have; anything else is reported (a typo would otherwise
# drop a constraint without a word). KAI's v2alpha2 has a few more that topogang does not use.
OBJECT_FIELDS = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
SPEC_FIELDS = frozenset(
    {
        "minMember",
        "minSubGroup",
        "queue",
        "priorityClassName",
        "markUnschedulable",
        "schedulingBackoff",
        "topologyConstraint",
        "topologyConstraints",
        "subGroups",
    }
)
KAI_ONLY_SPEC_FIELDS = frozenset({"preemptibility", "parallelism", "completions", "backoffLimit"})
SUBGROUP_FIELDS = frozenset({"name", "parent", "minMember", "minSubGroup", "topologyConstraint"})
CONSTRAINT_FIELDS = frozenset({"requiredTopologyLevel", "preferredTopologyLevel", "topology"})
CONSTRAINTS_FIELDS = frozenset({"global", "subGroups", "subGroupSets"})
SET_FIELDS = frozenset({"subGroups", "constraint"})


@dataclass(frozen=True, slots=True)
class TopologyConstraint:
    required: str | None = None  # a level name as written; resolved against a Topology later
    preferred: str | None = None
    topology: str | None = None
    field: str = ""  # where it was written, e.g. "spec.topologyConstraints.subGroups.decode"
    # LeaderWorkerSet's exclusive topology: the scope's domain of the required level holds no
    # other gang's pods. Set by the grouper (not part of KAI's hierarchical PodGroup design's API).
    exclusive: bool = False
    # Kubernetes' scheduling.k8s.io groups list required levels as node label keys, one entry
    # each: the levels besides `required` (the finest of all holds), and where each one, `required`
    # first, was written when that is not `<field>.requiredTopologyLevel`.
    more_required: tuple[str, ...] = ()
    required_fields: tuple[str, ...] = ()
    # A constraint the grouper read from a workload (its annotations, a ResourceInterface's path):
    # the object the user wrote it on, and where its preferred level and Topology were written,
    # so that a message names them there and never a field of the PodGroup topogang built.
    obj: str = ""
    preferred_at: str = ""
    topology_at: str = ""

    @property
    def empty(self) -> bool:
        return not self.required and not self.preferred

    def required_levels(self) -> list[tuple[str, str]]:
        """Every required level as written, with the field path it was written at."""
        names = [n for n in (self.required, *self.more_required) if n]
        return [
            (
                name,
                self.required_fields[i] if i < len(self.required_fields) else f"{self.field}.requiredTopologyLevel",
            )
            for i, name in enumerate(names)
        ]

    def preferred_field(self) -> str:
        return self.preferred_at or f"{self.field}.preferredTopologyLevel"

    def topology_field(self) -> str:
        return self.topology_at or f"{self.field}.topology"


@dataclass(frozen=True, slots=True)
class SubGroupSpec:
    name: str
    parent: str | None = None
    min_member: int | None = None
    min_subgroup: int | None = None
    # The pods of a segment or slice of a workload (KAI's segment-size, Kueue's podset-slice-size),
    # 0 for any other SubGroup: they work as one group, so an elastic one (minMember 0) is placed
    # with all of them or not at all. Set by the grouper; the PodGroup API has no such field, so
    # it stays in memory.
    segment_pods: int = 0


@dataclass(frozen=True, slots=True)
class SubGroupSet:
    subgroups: tuple[str, ...]
    constraint: TopologyConstraint


@dataclass(frozen=True)
class PodGroupSpec:
    namespace: str
    name: str
    min_member: int | None = None
    min_subgroup: int | None = None
    subgroups: tuple[SubGroupSpec, ...] = ()
    global_constraint: TopologyConstraint | None = None
    subgroup_constraints: Mapping[str, TopologyConstraint] = field(default_factory=dict)
    subgroup_sets: tuple[SubGroupSet, ...] = ()
    queue: str = ""
    priority_class_name: str = ""
    mark_unschedulable: bool | None = None
    scheduling_backoff: int | None = None
    uid: str = ""
    api_version: str = "scheduling.topogang.io/v1alpha1"
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    created: float | None = None
    generation: int = 0  # metadata.generation: what a status's observedGeneration refers to
    # The workload topogang derived this PodGroup from ("TFJob ml/train"), whose annotations
    # these are; "" for a PodGroup object. Messages about the annotations name it.
    derived_from: str = ""
    # scheduling.topogang.io/max-wait (model/max_wait.py): seconds it may wait for room before it
    # is overdue; None: the cluster's default (`topogang serve --max-wait`), if any.
    max_wait: float | None = None
    # Kubernetes' PodGroup gives the gang a priority of its own (spec.priority, resolved by the
    # Priority admission plugin): when set, it is the gang's, whatever its pods say.
    priority: int | None = None
    # disruptionMode all: the gang may be disrupted only as a whole (extender.core.disruption).
    disruption_all: bool = False
    # preemptionPolicy Never on Kubernetes' PodGroup: the gang never preempts.
    never_preempts: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def topology_name(self) -> str | None:
        return self.annotations.get(TOPOLOGY_ANNOTATION) or None

    def children_of(self, parent: str | None) -> list[SubGroupSpec]:
        """The SubGroups whose parent is `parent` (None: the top level), in spec order."""
        return list(self._children.get(parent, ()))

    @cached_property
    def _children(self) -> Mapping[str | None, tuple[SubGroupSpec, ...]]:
        # Built once per spec, so walking the tree is linear in the number of SubGroups.
        children: dict[str | None, list[SubGroupSpec]] = {}
        for sg in self.subgroups:
            children.setdefault(sg.parent, []).append(sg)
        return {parent: tuple(kids) for parent, kids in children.items()}


def _constraint(raw: object, where: str, errors: ErrorList) -> TopologyConstraint | None:
    body = mapping(raw, where, errors)
    unknown_fields(body, CONSTRAINT_FIELDS, where, errors)
    if not body:
        return None
    c = TopologyConstraint(
        required=opt_str(body.get("requiredTopologyLevel"), f"{where}.requiredTopologyLevel", errors) or None,
        preferred=opt_str(body.get("preferredTopologyLevel"), f"{where}.preferredTopologyLevel", errors) or None,
        topology=opt_str(body.get("topology"), f"{where}.topology", errors) or None,
        field=where,
    )
    return None if c.empty else c


def _count(raw: object, where: str, errors: ErrorList) -> int | None:
    value = opt_int(raw, where, errors)
    if value is not None and value < 0:
        errors.add(where, f"expected an integer >= 0, got {value}")
        return None
    return value


def _subgroups(spec: JSON, errors: ErrorList) -> tuple[list[SubGroupSpec], dict[str, TopologyConstraint]]:
    """spec.subGroups, and the constraints written inline on them (KAI's v2alpha2 spelling)."""
    subgroups: list[SubGroupSpec] = []
    inline_constraints: dict[str, TopologyConstraint] = {}
    raw_subgroups = seq(spec.get("subGroups"), "spec.subGroups", errors)
    if len(raw_subgroups) > MAX_SUBGROUPS:  # not even read: the gang is Invalid anyway
        errors.add("spec.subGroups", f"has {len(raw_subgroups):,} SubGroups; {beyond(MAX_SUBGROUPS)}")
        raw_subgroups = []
    for i, item in enumerate(raw_subgroups):
        where = f"spec.subGroups[{i}]"
        sg = mapping(item, where, errors)
        unknown_fields(sg, SUBGROUP_FIELDS, where, errors)
        sg_name = opt_str(sg.get("name"), f"{where}.name", errors)
        if not sg_name:
            errors.add(f"{where}.name", "expected a non-empty SubGroup name")
            continue
        subgroups.append(
            SubGroupSpec(
                name=sg_name,
                parent=opt_str(sg.get("parent"), f"{where}.parent", errors) or None,
                min_member=_count(sg.get("minMember"), f"{where}.minMember", errors),
                min_subgroup=_count(sg.get("minSubGroup"), f"{where}.minSubGroup", errors),
            )
        )
        # KAI's v2alpha2 spells a SubGroup's constraint inline as `topologyConstraint`.
        inline = _constraint(sg.get("topologyConstraint"), f"{where}.topologyConstraint", errors)
        if inline is not None:
            inline_constraints[sg_name] = inline
    return subgroups, inline_constraints


def parse_podgroup(body: JSON, default_namespace: str = "default") -> PodGroupSpec:
    """Parse and check a PodGroup; raise InvalidObject listing every problem with its field."""
    meta, name, namespace, errors = identify(body, "PodGroup", default_namespace)
    api_version = str(body.get("apiVersion") or "scheduling.topogang.io/v1alpha1")
    spec = mapping(body.get("spec"), "spec", errors)
    unknown_fields(body, OBJECT_FIELDS, "", errors)
    kai = KAI_ONLY_SPEC_FIELDS if api_version == KAI_API_VERSION else frozenset()
    unknown_fields(spec, SPEC_FIELDS | kai, "spec", errors)

    subgroups, inline_constraints = _subgroups(spec, errors)

    tc = mapping(spec.get("topologyConstraints"), "spec.topologyConstraints", errors)
    unknown_fields(tc, CONSTRAINTS_FIELDS, "spec.topologyConstraints", errors)
    global_constraint = _constraint(tc.get("global"), "spec.topologyConstraints.global", errors)
    singular = _constraint(spec.get("topologyConstraint"), "spec.topologyConstraint", errors)
    if singular is not None:
        if global_constraint is not None:
            errors.add("spec.topologyConstraint", "set either this or spec.topologyConstraints.global, not both")
        global_constraint = singular
    sg_constraints: dict[str, TopologyConstraint] = {}
    for key, raw in mapping(tc.get("subGroups"), "spec.topologyConstraints.subGroups", errors).items():
        c = _constraint(raw, f"spec.topologyConstraints.subGroups.{key}", errors)
        if c is not None:
            sg_constraints[str(key)] = c
    for key, c in inline_constraints.items():
        if key in sg_constraints:
            errors.add(c.field, f"SubGroup {key} also has spec.topologyConstraints.subGroups.{key}; set one")
        sg_constraints[key] = c
    sets: list[SubGroupSet] = []
    for i, item in enumerate(seq(tc.get("subGroupSets"), "spec.topologyConstraints.subGroupSets", errors)):
        where = f"spec.topologyConstraints.subGroupSets[{i}]"
        body_set = mapping(item, where, errors)
        unknown_fields(body_set, SET_FIELDS, where, errors)
        names = tuple(str(n) for n in seq(body_set.get("subGroups"), f"{where}.subGroups", errors))
        c = _constraint(body_set.get("constraint"), f"{where}.constraint", errors)
        if c is not None:
            sets.append(SubGroupSet(names, c))
        elif not names:
            errors.add(f"{where}.subGroups", "expected a list of SubGroup names")

    annotations = str_map(meta.get("annotations"), "metadata.annotations", errors)
    # A misspelt annotation (kai.scheduler/topolgy) would drop what it says: refused, as a field
    # is; unknown ones are only warned about, with the gang (grouping).
    errors.errors.extend(annotation_keys.problems(annotations, errors.obj)[0])
    wait, bad_wait = max_wait(annotations, errors.obj)
    if bad_wait is not None:
        errors.errors.append(bad_wait)
    pg = PodGroupSpec(
        namespace=namespace,
        name=name,
        min_member=_count(spec.get("minMember"), "spec.minMember", errors),
        min_subgroup=_count(spec.get("minSubGroup"), "spec.minSubGroup", errors),
        subgroups=tuple(subgroups),
        global_constraint=global_constraint,
        subgroup_constraints=sg_constraints,
        subgroup_sets=tuple(sets),
        queue=opt_str(spec.get("queue"), "spec.queue", errors) or "",
        priority_class_name=opt_str(spec.get("priorityClassName"), "spec.priorityClassName", errors) or "",
        mark_unschedulable=opt_bool(spec.get("markUnschedulable"), "spec.markUnschedulable", errors),
        scheduling_backoff=_backoff(spec.get("schedulingBackoff"), errors),
        uid=opt_str(meta.get("uid"), "metadata.uid", errors) or "",
        api_version=api_version,
        labels=str_map(meta.get("labels"), "metadata.labels", errors),
        annotations=annotations,
        created=_timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp", errors),
        generation=opt_int(meta.get("generation"), "metadata.generation", errors) or 0,
        max_wait=wait,
    )
    validate_structure(pg, errors)
    errors.raise_if_any()
    return pg


def validate_structure(pg: PodGroupSpec, errors: ErrorList) -> None:
    """The checks that need only the object itself (levels are checked against a Topology later)."""
    index: dict[str, int] = {}
    for i, sg in enumerate(pg.subgroups):
        if sg.name in index:
            errors.add(f"spec.subGroups[{i}].name", f"{sg.name!r} is already spec.subGroups[{index[sg.name]}]")
        else:
            index[sg.name] = i
    have = ", ".join(sorted(index)) or "none"
    for i, sg in enumerate(pg.subgroups):
        if sg.parent is not None and sg.parent not in index:
            errors.add(
                f"spec.subGroups[{i}].parent", f"names SubGroup {sg.parent!r}, which does not exist (have: {have})"
            )
    _check_cycles(pg, index, errors)

    def check_level(where: str, min_member: int | None, min_subgroup: int | None, children: int) -> None:
        if min_member is not None and min_subgroup is not None:
            errors.add(f"{where}.minSubGroup", "set either minMember or minSubGroup on one level, not both")
        if children == 0:
            if min_subgroup is not None:
                errors.add(f"{where}.minSubGroup", "counts child SubGroups, but this level has none; use minMember")
            return
        count = min_subgroup if min_subgroup is not None else min_member
        name = "minSubGroup" if min_subgroup is not None else "minMember"
        if count is not None and count > children:
            errors.add(f"{where}.{name}", f"is {count} but this level has only {children} child SubGroup(s)")

    check_level("spec", pg.min_member, pg.min_subgroup, len(pg.children_of(None)) if pg.subgroups else 0)
    for i, sg in enumerate(pg.subgroups):
        check_level(f"spec.subGroups[{i}]", sg.min_member, sg.min_subgroup, len(pg.children_of(sg.name)))

    for key, c in pg.subgroup_constraints.items():
        if key not in index:
            errors.add(c.field, f"names SubGroup {key!r}, which does not exist (have: {have})")
    member_of: dict[str, int] = {}
    for i, s in enumerate(pg.subgroup_sets):
        where = f"spec.topologyConstraints.subGroupSets[{i}].subGroups"
        if not s.subgroups:
            errors.add(where, "expected at least one SubGroup name")
        parents = set()
        for name in s.subgroups:
            if name not in index:
                errors.add(where, f"names SubGroup {name!r}, which does not exist (have: {have})")
                continue
            if name in member_of:
                other = member_of[name]
                msg = f"SubGroup {name!r} is already in subGroupSets[{other}]; a SubGroup belongs to one set"
                errors.add(where, msg)
            member_of[name] = i
            parents.add(pg.subgroups[index[name]].parent)
        if len(parents) > 1:
            shown = ", ".join(sorted(p or "(the PodGroup)" for p in parents))
            errors.add(where, f"the SubGroups of one set must share a parent; these have parents {shown}")


def _check_cycles(pg: PodGroupSpec, index: dict[str, int], errors: ErrorList) -> None:
    parent_of = {sg.name: sg.parent for sg in pg.subgroups}
    reported: set[str] = set()
    walked: set[str] = set()  # SubGroups whose walk up already ended: each is walked once
    for start in parent_of:
        if start in walked:
            continue
        seen = [start]
        on_path = {start}
        node = parent_of.get(start)
        while node is not None and node in parent_of and node not in walked:
            if node in on_path:
                cycle = [*seen[seen.index(node) :], node]
                if not reported.intersection(cycle):
                    where = f"spec.subGroups[{index[node]}].parent"
                    errors.add(where, f"SubGroups form a cycle: {' -> '.join(cycle)}")
                    reported.update(cycle)
                break
            seen.append(node)
            on_path.add(node)
            node = parent_of.get(node)
        walked.update(seen)


# KAI's hierarchical PodGroup design: "Currently only supporting -1 and 1".
SCHEDULING_BACKOFF_VALUES = (-1, 1)


def _backoff(obj: object, errors: ErrorList) -> int | None:
    value = opt_int(obj, "spec.schedulingBackoff", errors)
    if value is not None and value not in SCHEDULING_BACKOFF_VALUES:
        errors.add(
            "spec.schedulingBackoff", f"expected -1 (never mark) or 1 (mark after one failed attempt), got {value}"
        )
        return None
    return value
