"""A gang from a PodGroup: its spec, its pods and the cluster's Topologies make the Gang the
engine places.

This is where names become levels: each constraint picks its Topology (its own `topology`, else
the PodGroup's `kai.scheduler/topology` annotation, else the only Topology object), and level
names resolve against it. Problems with the PodGroup make the whole gang invalid, with errors
that name the field as the user wrote it (a derived PodGroup's constraints name the workload's
annotations, never the PodGroup built from them), each said once however many SubGroups share the
constraint; a pod that cannot join (no SubGroup label, an unknown SubGroup) is left out with its
own reason, and the gang goes on without it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from extender.model.errors import FieldError
from extender.model.labels import SUBGROUP_LABEL, TOPOLOGY_ANNOTATION
from extender.model.pod import Placement, PodInfo
from extender.model.podgroup import PodGroupSpec, SubGroupSpec, TopologyConstraint
from extender.model.topology import AUTO_LEVEL, NODE_ONLY, LevelError, TopologySpec
from extender.placement.gang import Gang, Member, Rule, Scope, Shape


@dataclass(frozen=True)
class BuiltGang:
    gang: Gang | None  # None when the PodGroup is invalid
    errors: tuple[FieldError, ...] = ()
    stray: Mapping[str, str] = field(default_factory=dict)  # pod key -> why it is not a member
    warnings: tuple[str, ...] = ()  # constraints that cannot take effect

    @property
    def valid(self) -> bool:
        return self.gang is not None


_DIGIT_RUNS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[object, ...]:
    """'worker-10' after 'worker-9'."""
    return tuple([int(p) if p.isdigit() else p for p in _DIGIT_RUNS.split(text)])


def build_gang(
    pg: PodGroupSpec,
    pods: Sequence[PodInfo],
    topologies: Mapping[str, TopologySpec],
    order: Mapping[str, int] | None = None,
    subgroup_of: Mapping[str, str] | None = None,
    default_topology: str | None = None,
) -> BuiltGang:
    """Resolve `pg` against `topologies` and attach `pods` (the pods that name this group).

    `order` ranks pods within a leaf (the pod index, where the workload has one); `subgroup_of`
    gives the leaf SubGroup of pods the grouper assigned, instead of their SubGroup label.
    `default_topology` is the Topology when the PodGroup names none (a Kueue ResourceFlavor's).
    """
    errors: list[FieldError] = []
    topology = _choose_topology(pg, topologies, errors, default_topology)
    builder = _GangBuilder(pg, topology, errors, order or {})
    members, stray = _assign_pods(pg, pods, subgroup_of or {})
    root = builder.root(members)
    # Segments share their replica type's constraint: what is wrong with it is said once.
    if errors or topology is None:
        return BuiltGang(None, tuple(dict.fromkeys(errors)), stray)
    warnings = tuple(dict.fromkeys(builder.warnings))
    return BuiltGang(Gang(pg.key, root, builder.shapes(), topology), (), stray, warnings)


def _assign_pods(
    pg: PodGroupSpec, pods: Sequence[PodInfo], subgroup_of: Mapping[str, str]
) -> tuple[dict[str | None, list[PodInfo]], dict[str, str]]:
    """The live pods of each leaf SubGroup (None: the PodGroup itself when it has no SubGroups),
    and the pods that cannot join, with why."""
    obj = f"PodGroup {pg.key}"
    leaves = {sg.name for sg in pg.subgroups if not pg.children_of(sg.name)}
    members: dict[str | None, list[PodInfo]] = {name: [] for name in leaves}
    members[None] = []
    stray: dict[str, str] = {}
    leaf_names = ", ".join(sorted(leaves))
    for pod in pods:
        if pod.terminal or pod.deleting:
            continue
        if not pg.subgroups:
            members[None].append(pod)
            continue
        name = (subgroup_of.get(pod.key) if subgroup_of else None) or pod.labels.get(SUBGROUP_LABEL)
        if name is None:
            stray[pod.key] = f"no label {SUBGROUP_LABEL}; {obj} has SubGroups ({leaf_names})"
        elif name in leaves:
            members[name].append(pod)
        elif any(sg.name == name for sg in pg.subgroups):
            stray[pod.key] = (
                f"label {SUBGROUP_LABEL}={name} names a SubGroup with SubGroups of its own;"
                f" pods join leaf SubGroups ({leaf_names})"
            )
        else:
            stray[pod.key] = f"label {SUBGROUP_LABEL}={name} names no SubGroup of {obj} (have: {leaf_names})"
    return members, stray


class _GangBuilder:
    """The scope tree of one PodGroup: rules resolved against its Topology, pods as members."""

    def __init__(
        self, pg: PodGroupSpec, topology: TopologySpec | None, errors: list[FieldError], rank: Mapping[str, int]
    ) -> None:
        self.pg = pg
        self.obj = f"PodGroup {pg.key}"
        self.written = pg.derived_from or self.obj  # who wrote what is not on a constraint
        self.topology = topology
        self.errors = errors
        self.rank = rank
        self._shapes: dict[Shape, int] = {}
        self._shape_of: dict[tuple[tuple[tuple[str, int], ...], Placement], int] = {}  # see _shape
        self._ids = iter(range(1 << 30))  # pre-order scope ids
        self._set_of = {name: i for i, s in enumerate(pg.subgroup_sets) for name in s.subgroups}
        self._members: Mapping[str | None, list[PodInfo]] = {}
        self.warnings: list[str] = []
        self._outer: _Held | None = None  # the finest required constraint above the scope being built

    def shapes(self) -> tuple[Shape, ...]:
        return tuple(self._shapes)

    def root(self, members: Mapping[str | None, list[PodInfo]]) -> Scope:
        pg = self.pg
        self._members = members
        root_id = next(self._ids)
        rule = self.rule(pg.global_constraint)
        self._outer = self._holds(rule, pg.global_constraint, None)
        if pg.subgroups:
            children = self.children(None)
            minimum = _first(pg.min_subgroup, pg.min_member, sum(c.weight for c in children))
            return Scope(root_id, self.obj, minimum, children, rule=rule, key=pg.key)
        own = self.to_members(None)
        return Scope(root_id, self.obj, _first(pg.min_member, 1), members=own, rule=rule, key=pg.key)

    def rule(self, c: TopologyConstraint | None) -> Rule | None:
        if c is None or self.topology is None:
            return None
        required = self._finest(c)
        preferred: int | None = None
        if c.preferred:
            try:
                preferred = self._level(c.preferred, "preferred")
            except LevelError as exc:
                self.errors.append(FieldError(c.obj or self.written, c.preferred_field(), str(exc)))
        level = required[0] if required is not None else None
        if preferred is not None and level is not None and preferred <= level:
            preferred = None  # already implied by the required level
        if level is None and preferred is None:
            return None
        return Rule(level, preferred, c.field, c.exclusive)

    def _finest(self, c: TopologyConstraint) -> tuple[int, str, str] | None:
        """The finest of the constraint's required levels: (level, as written, its field)."""
        best: tuple[int, str, str] | None = None
        for name, where in c.required_levels():
            try:
                level = self._level(name, "required")
            except LevelError as exc:
                self.errors.append(FieldError(c.obj or self.written, where, str(exc)))
                continue
            if best is None or level > best[0]:
                best = (level, name, where)
        return best

    def _holds(self, rule: Rule | None, c: TopologyConstraint | None, outer: _Held | None) -> _Held | None:
        """The finest required constraint holding the scope's descendants: its own, or `outer`."""
        if rule is None or rule.required is None or c is None or not c.required:
            return outer
        if outer is not None and outer.level >= rule.required:
            return outer
        finest = self._finest(c)
        assert finest is not None
        return _Held(*finest, c.obj)

    def _enter(self, rule: Rule | None, c: TopologyConstraint | None) -> _Held | None:
        """Check the scope's constraint against the ones above it, and hold its descendants;
        return what held the scope, to restore after its children are built."""
        outer = self._outer
        if rule is not None and c is not None and outer is not None:
            written = [(n, w, "required") for n, w in c.required_levels()]
            if c.preferred:
                written.append((c.preferred, c.preferred_field(), "preferred"))
            for name, where, attr in written:
                try:
                    level = self._level(name, attr)
                except LevelError:
                    continue  # reported by rule()
                if level < outer.level:
                    above = outer.field if outer.obj == c.obj else f"{outer.obj or self.written} {outer.field}"
                    self.warnings.append(
                        f"{c.obj + ': ' if c.obj else ''}{where}={name!r} cannot take effect: it is coarser than"
                        f" {above}={outer.name!r} above it, which already"
                        f" holds the SubGroup in one {outer.name}"
                    )
        self._outer = self._holds(rule, c, outer)
        return outer

    def _level(self, name: str, attr: str) -> int:
        topology = self.topology
        assert topology is not None
        if attr == "preferred" and name == AUTO_LEVEL and AUTO_LEVEL not in topology.valid_names():
            return len(topology.levels)  # the finest: placement climbs from there
        return topology.level(name)

    def to_members(self, leaf: str | None) -> tuple[Member, ...]:
        rank = self.rank
        if rank:
            ps = sorted(self._members[leaf], key=lambda p: (rank.get(p.key, 0), natural_key(p.name)))
        else:  # the same order, without a pod key built per pod
            ps = sorted(self._members[leaf], key=lambda p: natural_key(p.name))
        return tuple(Member(p.key, self._shape(p), p.node_name if p.uses_capacity else None) for p in ps)

    def _shape(self, pod: PodInfo) -> int:
        """The pod's shape index. Pods of a gang are mostly alike, so their requests as written
        find the index before a Shape is built and hashed (equal Shapes still share an index)."""
        raw = (tuple(pod.requests.items()), pod.placement)
        idx = self._shape_of.get(raw)
        if idx is None:
            shape = Shape(tuple(sorted(pod.requests.items())), pod.placement)
            idx = self._shape_of[raw] = self._shapes.setdefault(shape, len(self._shapes))
        return idx

    def children(self, parent: str | None) -> tuple[Scope, ...]:
        pg = self.pg
        kids = pg.children_of(parent)
        built: list[Scope] = []
        done_sets: set[int] = set()
        for sg in kids:
            i = self._set_of.get(sg.name)
            if i is None:
                built.append(self.subgroup(sg))
            elif i not in done_sets:
                done_sets.add(i)
                s = pg.subgroup_sets[i]
                sid = next(self._ids)
                rule = self.rule(s.constraint)
                outer = self._enter(rule, s.constraint)
                inner = tuple(self.subgroup(k) for k in kids if k.name in s.subgroups)
                self._outer = outer
                label = "SubGroupSet [" + ", ".join(k.name for k in kids if k.name in s.subgroups) + "]"
                built.append(Scope(sid, label, len(inner), inner, rule=rule, weight=len(inner), key=label))
        return tuple(built)

    def subgroup(self, sg: SubGroupSpec) -> Scope:
        sid = next(self._ids)
        written = self.pg.subgroup_constraints.get(sg.name)
        rule = self.rule(written)
        outer = self._enter(rule, written)
        children = self.children(sg.name)
        self._outer = outer
        label = f"SubGroup {sg.name}"
        if children:
            n = sum(c.weight for c in children)
            minimum = _first(sg.min_subgroup, sg.min_member, n)
            return Scope(sid, label, minimum, children, rule=rule, name=sg.name, key=sg.name)
        minimum = _first(sg.min_member, 1)
        members = self.to_members(sg.name)
        segment = sg.segment_pods
        return Scope(sid, label, minimum, members=members, rule=rule, name=sg.name, key=sg.name, segment_pods=segment)


@dataclass(frozen=True)
class _Held:
    """A required constraint that holds a scope and everything below it in one domain."""

    level: int
    name: str  # the level as written
    field: str  # where it was written (spec.topologyConstraints.global.requiredTopologyLevel)
    obj: str = ""  # on which object, when not the PodGroup (TopologyConstraint.obj)


def _first(*values: int | None) -> int:
    return next(v for v in values if v is not None)


def _choose_topology(
    pg: PodGroupSpec,
    topologies: Mapping[str, TopologySpec],
    errors: list[FieldError],
    default: str | None = None,
) -> TopologySpec | None:
    """One Topology for the whole gang; constraints that name different ones are an error."""
    obj = pg.derived_from or f"PodGroup {pg.key}"  # whose kai.scheduler/topology annotation it is
    written = [pg.global_constraint, *pg.subgroup_constraints.values(), *(s.constraint for s in pg.subgroup_sets)]
    constraints = [c for c in written if c is not None]
    have = ", ".join(sorted(topologies)) or "none"
    chosen: dict[str, tuple[str, str, str]] = {}  # topology name -> the first (constraint, object, field) choosing it
    for c in constraints:
        name = c.topology or pg.topology_name or default
        at, where = (
            (c.obj or obj, c.topology_field()) if c.topology else (obj, f"metadata.annotations[{TOPOLOGY_ANNOTATION}]")
        )
        if not c.topology and not pg.topology_name and default:
            where = "the pods' Kueue ResourceFlavor spec.topologyName"
        if name is None:
            if len(topologies) == 1:
                name = next(iter(topologies))
            else:
                why = "no Topology object exists" if not topologies else f"{len(topologies)} exist ({have})"
                # A workload's constraint has no topology field: name the level it wrote.
                field = (c.required_levels() or [("", c.preferred_field())])[0][1] if c.obj else c.topology_field()
                msg = f"names no Topology and {why}; set it or the annotation {TOPOLOGY_ANNOTATION}"
                errors.append(FieldError(c.obj or obj, field, msg))
                continue
        if name not in topologies:
            errors.append(FieldError(at, where, f"names Topology {name!r}, which does not exist (have: {have})"))
            continue
        chosen.setdefault(name, (c.field, at, where))
    if len(chosen) > 1:
        shown = ", ".join(f"{name} ({field})" for name, (field, _, _) in chosen.items())
        if pg.derived_from:  # the workload has no such field: named where the second Topology was chosen
            _, at, where = list(chosen.values())[1]
            errors.append(FieldError(at, where, f"constraints of one gang must use one Topology; found {shown}"))
        else:
            msg = f"constraints of one PodGroup must use one Topology; found {shown}"
            errors.append(FieldError(obj, "spec.topologyConstraints", msg))
        return None
    if errors:
        return None
    if chosen:
        return topologies[next(iter(chosen))]
    # No constraint: still use the cluster's topology, so the default compactness follows racks.
    if pg.topology_name is not None and pg.topology_name in topologies:
        return topologies[pg.topology_name]
    if pg.topology_name is None and default is not None and default in topologies:
        return topologies[default]
    if len(topologies) == 1:
        return next(iter(topologies.values()))
    return NODE_ONLY
