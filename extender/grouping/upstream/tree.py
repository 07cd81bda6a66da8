"""A tree of scheduling.k8s.io groups as one gang.

A pod names its PodGroup (`spec.schedulingGroup.podGroupName`); the PodGroup may name a
CompositePodGroup above it (`spec.parentCompositePodGroupName`), and so on up to a root, at most
four levels. The whole tree under the root is one gang, keyed `<namespace>/<kind>-<root>`:

    root CompositePodGroup (minGroupCount)     the gang: minimum = minGroupCount child groups
    ├── CompositePodGroup (minGroupCount)      a SubGroup over SubGroups
    │   └── PodGroup (minCount)                a leaf SubGroup: its pods
    └── PodGroup (minCount)

A PodGroup that names no parent is a gang of its own: one leaf SubGroup under the gang.
Each group's `schedulingConstraints.topology` keys are required levels of its SubGroup, and the
annotations topogang adds (preferred levels, segments) are read from the group objects as from a
workload's PodTemplate. The children of a group are found by listing the namespace's groups,
since a parent does not name its children.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from extender.grouping import names as n
from extender.grouping.annotations import merge, placement
from extender.grouping.grouper import ClaimedPod, GangDraft, Part
from extender.grouping.objects import ObjectLookup
from extender.grouping.upstream.objects import COMPOSITE, GROUP, MAX_DEPTH, PODGROUP, Group, api_versions, read_group
from extender.grouping.values import annotation_keys
from extender.model.annotation_keys import MOVABLE
from extender.model.errors import FieldError
from extender.model.labels import ON_UNREPAIRABLE
from extender.model.limits import MAX_REPLICAS, MAX_SUBGROUPS, beyond
from extender.model.max_wait import MAX_WAIT_ANNOTATION
from extender.model.pod import OwnerRef, PodInfo
from extender.model.podgroup import SubGroupSpec

# The read every pod of a tree records for its root: a change to any group of the tree marks it.
TREE = f"{GROUP} tree"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # the Job controller's pods


def find(objects: ObjectLookup, kind: str, namespace: str, name: str) -> Group | None:
    for api in api_versions(kind):
        body = objects.get(api, kind, namespace, name)
        if body is not None:
            return read_group(kind, body, namespace)
    return None


@dataclass
class Path:
    """From a pod's PodGroup up to the root of its tree, as far as the objects are visible."""

    groups: list[Group]  # the pod's PodGroup first
    wait: str | None = None  # an object on the way is not visible yet: why the pod waits
    error: FieldError | None = None  # a cycle, or a tree deeper than MAX_DEPTH

    @property
    def root(self) -> Group | None:
        return self.groups[-1] if self.groups else None


def path_of(pod: PodInfo, objects: ObjectLookup) -> Path:
    assert pod.scheduling_group is not None
    ns = pod.namespace
    group = find(objects, PODGROUP, ns, pod.scheduling_group)
    if group is None:
        why = f"{PODGROUP} {ns}/{pod.scheduling_group} ({GROUP}, its spec.schedulingGroup) does not exist yet"
        return Path([], wait=why)
    path = Path([group])
    seen = {(group.kind, group.name)}
    while group.parent is not None:
        parent = find(objects, COMPOSITE, ns, group.parent)
        if parent is None:
            path.wait = f"{COMPOSITE} {ns}/{group.parent} (parent of {group.label}) does not exist yet"
            return path
        if (parent.kind, parent.name) in seen:
            why = f"names {parent.label}, which is below it: the groups form a cycle"
            path.error = FieldError(group.label, "spec.parentCompositePodGroupName", why)
            return path
        if len(path.groups) >= MAX_DEPTH:
            why = f"makes the tree deeper than {MAX_DEPTH} levels (Kubernetes' limit)"
            path.error = FieldError(group.label, "spec.parentCompositePodGroupName", why)
            return path
        seen.add((parent.kind, parent.name))
        path.groups.append(parent)
        group = parent
    return path


def reads_of(pod: PodInfo, objects: ObjectLookup) -> tuple[str, Path, tuple[tuple[str, str, str], ...]]:
    """(the family kind, the path, the objects read as (kind, namespace, name)); the family key
    is the topmost group reached (the root once every object is visible)."""
    path = path_of(pod, objects)
    ns = pod.namespace
    reads = [(g.kind, ns, g.name) for g in path.groups]
    if not path.groups:
        reads.append((PODGROUP, ns, pod.scheduling_group or ""))
    elif path.wait is not None and path.groups[-1].parent is not None:
        reads.append((COMPOSITE, ns, path.groups[-1].parent))
    top = path.root
    top_name = top.name if top is not None else pod.scheduling_group or ""
    reads.append((TREE, ns, top_name))
    kind = f"{GROUP}/{top.kind if top is not None else PODGROUP}"
    return kind, path, tuple(reads)


def root_name(objects: ObjectLookup, kind: str, namespace: str, name: str) -> str:
    """The topmost group visible above a group (itself when it names no parent or is gone)."""
    group = find(objects, kind, namespace, name) if kind in (PODGROUP, COMPOSITE) else None
    for _ in range(MAX_DEPTH + 1):
        if group is None or group.parent is None:
            break
        parent = find(objects, COMPOSITE, namespace, group.parent)
        if parent is None:
            return group.parent
        group = parent
    return group.name if group is not None else name


def index_of(pod: PodInfo) -> int:
    """The pod's index (its pod-index label, else the Job's completion index); -1 when it has none."""
    label = pod.annotations.get(n.KAI_POD_INDEX_LABEL) or COMPLETION_INDEX
    raw = pod.labels.get(label, "")
    return int(raw) if raw.isdigit() and len(raw) < 10 else -1


def gang_key(root: Group) -> str:
    return f"{root.namespace}/{root.kind.lower()}-{root.name}"


@dataclass
class _Tree:
    root: Group
    draft: GangDraft
    leaves: set[str] = field(default_factory=set)
    pod_annotations: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


def _children(objects: ObjectLookup, namespace: str) -> dict[str, list[Group]]:
    """Every group of the namespace by the parent it names (PodGroups read in one version)."""
    out: dict[str, list[Group]] = {}
    for kind in (COMPOSITE, PODGROUP):
        seen: set[str] = set()
        for api in api_versions(kind):
            for body in objects.in_namespace(api, kind, namespace):
                g = read_group(kind, body, namespace)
                if g.name in seen or g.parent is None:
                    continue
                seen.add(g.name)
                out.setdefault(g.parent, []).append(g)
    for groups in out.values():
        groups.sort(key=lambda g: (g.kind != COMPOSITE, g.name))
    return out


def _constrain(tree: _Tree, g: Group, target: str | None) -> None:
    """The group's topology keys and its placement annotations on its SubGroup (None: the gang)."""
    draft = tree.draft
    own = placement(g.annotations, g.label, "", g.annotations.get(n.KAI_TOPOLOGY) or None, draft.errors)
    if own is not None:  # which group of the tree wrote it, as for its topology keys
        own = replace(own, field=f"[{g.kind} {g.name}] {own.field}")
    c = merge(g.constraint, own, g.label, draft.errors)
    if c is None:
        return
    if target is None:
        draft.global_constraint = c
    else:
        draft.constraints[target] = c


def build_tree(
    root: Group,
    objects: ObjectLookup,
    counts: Mapping[str, int],
    pod_annotations: Mapping[str, Mapping[str, str]] | None = None,
) -> _Tree:
    """The gang of the tree under ROOT; COUNTS: pods naming each PodGroup; POD_ANNOTATIONS: the
    annotations of one pod of each (its template's: a Job's segment annotations), which the
    group's own override."""
    owner = OwnerRef(root.api_version, root.kind, root.name, root.uid, True)
    # the gang's own annotations: its Topology, repair policy, maximum wait, movability (the rest is per group)
    gang_wide = (n.KAI_TOPOLOGY, ON_UNREPAIRABLE, MAX_WAIT_ANNOTATION, MOVABLE)
    annotations = {k: root.annotations[k] for k in gang_wide if k in root.annotations}
    draft = GangDraft(gang_key(root), root.label, root.label, owner, annotations, uid=root.uid)
    draft.keys_on_pods = True  # the pods' own; each group's are checked here, as it is read
    # kube-scheduler takes a pod's priority from the root of its tree; its disruption unit is the
    # highest group with disruptionMode all: topogang moves or preempts no part of any such gang
    draft.priority, draft.priority_class_name = root.priority, root.priority_class_name
    draft.disruption_all, draft.never_preempts = root.disruption_all, root.never_preempts
    tree = _Tree(root, draft, pod_annotations=pod_annotations or {})
    draft.errors.extend(root.errors)
    annotation_keys(root.annotations, root.label, "", draft.errors, draft.warnings)
    if root.kind == PODGROUP:
        _leaf(tree, root, None, counts)
        draft.root_min = 1
        return tree
    draft.root_min = root.minimum
    _constrain(tree, root, None)
    children = _children(objects, root.namespace)
    stack: list[tuple[Group, int]] = [(c, 2) for c in reversed(children.get(root.name, []))]
    while stack:
        g, depth = stack.pop()
        draft.errors.extend(g.errors)
        draft.disruption_all = draft.disruption_all or g.disruption_all
        annotation_keys(g.annotations, g.label, "", draft.errors, draft.warnings)
        parent = None if g.parent == root.name else g.parent
        if depth > MAX_DEPTH:
            why = f"makes the tree deeper than {MAX_DEPTH} levels (Kubernetes' limit)"
            draft.errors.append(FieldError(g.label, "spec.parentCompositePodGroupName", why))
            continue
        if len(draft.parts) + len(draft.parents) >= MAX_SUBGROUPS:
            why = f"the tree has more than {MAX_SUBGROUPS:,} groups; {beyond(MAX_SUBGROUPS)}"
            draft.errors.append(FieldError(root.label, "metadata.name", why))
            break
        if g.kind == PODGROUP:
            _leaf(tree, g, parent, counts)
            continue
        draft.parents.append(SubGroupSpec(g.name, parent, min_subgroup=g.minimum))
        _constrain(tree, g, g.name)
        stack.extend((c, depth + 1) for c in reversed(children.get(g.name, [])))
    _counts_fit(tree)
    return tree


def _leaf(tree: _Tree, g: Group, parent: str | None, counts: Mapping[str, int]) -> None:
    draft = tree.draft
    replicas = max(counts.get(g.name, 0), g.minimum)
    if replicas > MAX_REPLICAS:
        field_, what = (
            (_MIN_COUNT, f"is {g.minimum:,}") if g.minimum > MAX_REPLICAS else ("spec", f"{replicas:,} pods name it")
        )
        draft.errors.append(FieldError(g.label, field_, f"{what}; {beyond(MAX_REPLICAS)}"))
        replicas = MAX_REPLICAS
    # Its annotations as a PodTemplate's: preferred level, segments; its keys as its own SubGroup's.
    annotations = {**tree.pod_annotations.get(g.name, {}), **g.annotations}
    part = Part(g.name, replicas, g.minimum, annotations, "", g.label, COMPLETION_INDEX, parent=parent)
    draft.parts.append(part)
    tree.leaves.add(g.name)
    if g.constraint is not None:
        draft.constraints[g.name] = g.constraint


def _counts_fit(tree: _Tree) -> None:
    """A composite's minGroupCount beyond its child groups: named (and cut to what it has, so
    that the tree's own check does not say it again)."""
    draft = tree.draft
    children: dict[str | None, int] = {}
    for p in draft.parts:
        children[p.parent] = children.get(p.parent, 0) + 1
    for s in draft.parents:
        children[s.parent] = children.get(s.parent, 0) + 1
    for i, s in enumerate(draft.parents):
        have = children.get(s.name, 0)
        if s.min_subgroup is not None and s.min_subgroup > have:
            why = f"is {s.min_subgroup} but {have} group(s) name it as their parent"
            draft.errors.append(FieldError(f"{COMPOSITE} {tree.root.namespace}/{s.name}", _MIN_GROUP, why))
            draft.parents[i] = SubGroupSpec(s.name, s.parent, min_subgroup=have)
    have = children.get(None, 0)
    if draft.root_min is not None and draft.root_min > have and tree.root.kind == COMPOSITE:
        why = f"is {draft.root_min} but {have} group(s) name it as their parent"
        draft.errors.append(FieldError(tree.root.label, _MIN_GROUP, why))
        draft.root_min = have


_MIN_GROUP = "spec.schedulingPolicy.gang.minGroupCount"
_MIN_COUNT = "spec.schedulingPolicy.gang.minCount"


def claims(tree: _Tree, pods: Sequence[PodInfo]) -> list[ClaimedPod]:
    """Each pod of the tree joins the leaf SubGroup of its PodGroup."""
    out = []
    for pod in pods:
        name = pod.scheduling_group
        if name in tree.leaves:
            out.append(ClaimedPod(pod, name))
        else:
            why = f"names {PODGROUP} {name}, which is not in the tree of {tree.root.label}"
            out.append(ClaimedPod(pod, None, FieldError(f"Pod {pod.key}", "spec.schedulingGroup.podGroupName", why)))
    return out


__all__ = ["TREE", "Path", "build_tree", "claims", "find", "gang_key", "index_of", "path_of", "reads_of", "root_name"]
