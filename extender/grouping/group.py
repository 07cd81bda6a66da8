"""group_pods: which gang each pod belongs to, and each gang's PodGroup tree.

For each pod, in this order:
  1. `pod-group-name` annotation or `scheduling.x-k8s.io/pod-group` label: it joins that
     PodGroup object as written; while the object is missing, the pod waits. Else
     `spec.schedulingGroup.podGroupName` (Kubernetes' own PodGroup): it joins the gang of that
     PodGroup's tree (`upstream.tree`); while an object on its way to the root is missing, it waits.
  2. Its controller chain (the pod's controller, that object's controller, ... as far as the
     objects are visible) is tried from the topmost owner down. At each owner a ResourceInterface
     for its kind goes first, then the built-in grouper; either may hand off ("not mine"), and
     the next grouper, then the next owner down, is tried. A known owner topogang cannot see yet
     makes the pod wait: its spec decides the tree (KAI's pod-grouping design's pre-defined hierarchy).
  3. No grouper claims it (a Deployment's, a StatefulSet's, an unknown kind's): a plain pod, unless
     its workload asks to be a gang with a placement or gang annotation (`fallback`): then one
     gang per topmost owner, of the pods that share it, all required. DaemonSet and Node owners'
     pods are always plain.
  4. No owner and no group name: a plain pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from extender.grouping import names as n
from extender.grouping.assemble import assemble
from extender.grouping.fallback import asking, fallback
from extender.grouping.grouper import ClaimedPod, GangDraft, Grouper, Link, WorkloadDraft
from extender.grouping.kinds import BUILTIN, SIDE_READS
from extender.grouping.objects import ObjectLookup
from extender.grouping.resource_interface import ResourceInterface, group_with, hands_off, index_resource_interfaces
from extender.grouping.result import Grouping, GroupingResult
from extender.grouping.upstream import tree as upstream
from extender.grouping.values import annotation_keys, controller_ref
from extender.model.errors import FieldError, said_once, said_once_text
from extender.model.keys import GroupKey
from extender.model.labels import POD_GROUP_ANNOTATION, POD_GROUP_LABEL
from extender.model.limits import MAX_GANG_PODS, beyond
from extender.model.pod import PodInfo
from extender.model.podgroup import PodGroupSpec

MAX_CHAIN = 16  # owner chains are short; this only stops a cycle of ownerReferences


def explicit_group(pod: PodInfo) -> str | None:
    """The PodGroup a pod names, as "namespace/name"; None when it names none."""
    name = pod.annotations.get(POD_GROUP_ANNOTATION) or pod.labels.get(POD_GROUP_LABEL)
    return f"{pod.namespace}/{name}" if name else None


class _Chains:
    def __init__(self, objects: ObjectLookup, pods: Sequence[PodInfo] | Mapping[str, PodInfo]) -> None:
        self.objects = objects
        self.pods = pods if isinstance(pods, Mapping) else {p.key: p for p in pods}

    def chain(self, pod: PodInfo) -> list[Link]:
        """The pod's controller chain, direct controller first, up to the first owner not visible."""
        out: list[Link] = []
        ref = pod.controller
        seen: set[tuple[str, str, str]] = set()
        while ref is not None and len(out) < MAX_CHAIN:
            ident = (ref.api_version, ref.kind, ref.name)
            if ident in seen:
                break
            seen.add(ident)
            if (ref.api_version, ref.kind) in n.PLAIN_OWNERS:
                out.append(Link(ref, pod.namespace, None, self.objects))
                break
            owner_pod = (
                self.pods.get(f"{pod.namespace}/{ref.name}") if (ref.api_version, ref.kind) == ("v1", "Pod") else None
            )
            if owner_pod is not None:  # LeaderWorkerSet: the leader pod owns its workers' StatefulSet
                out.append(Link(ref, pod.namespace, _pod_body(owner_pod), self.objects))
                ref = owner_pod.controller
                continue
            obj = self.objects.get(ref.api_version, ref.kind, pod.namespace, ref.name)
            out.append(Link(ref, pod.namespace, obj, self.objects))
            if obj is None:
                break
            ref = controller_ref(obj)
        return out


@dataclass(frozen=True, slots=True, order=True)
class Family:
    """Pods grouped together: those naming one PodGroup (kind "PodGroup"), or sharing the top
    of their owner chain (that owner's kind)."""

    kind: str
    key: GroupKey

    @property
    def podgroup(self) -> str | None:
        """The PodGroup this family names, as "namespace/name"; None for an owner's family."""
        return str(self.key) if self.kind == PODGROUP else None

    def __str__(self) -> str:
        return f"{self.kind} {self.key}"


PODGROUP = "PodGroup"


def family_key(
    pod: PodInfo, objects: ObjectLookup, pods: Mapping[str, PodInfo]
) -> tuple[Family | None, tuple[tuple[str, str, str], ...]]:
    """The pods that are grouped together share a family: the PodGroup they name, or the top of
    their owner chain. Returns (family or None for a plain pod, the owners the chain read as
    (kind, namespace, name)), so a caller can regroup one family when one of those changes
    instead of every pod (`group_pods` of one family equals its share of `group_pods` of all).
    """
    named = explicit_group(pod)
    if named is not None:
        return Family(PODGROUP, GroupKey.parse(named)), ()
    if pod.scheduling_group is not None:
        kind, _path, reads = upstream.reads_of(pod, objects)
        return Family(kind, GroupKey(pod.namespace, reads[-1][2])), reads
    chain = _Chains(objects, pods).chain(pod)
    read = tuple((link.ref.kind, link.namespace, link.ref.name) for link in chain)
    for link in chain:  # objects besides owners a grouper reads for this pod (a Grove PodGang)
        side = SIDE_READS.get(link.gvk)
        if side is not None:
            read += tuple((kind, link.namespace, name) for kind, name in side(pod))
    if not chain or any(link.gvk in n.PLAIN_OWNERS for link in chain):
        return None, read
    top = chain[-1]
    return Family(top.ref.kind, GroupKey(top.namespace, top.ref.name)), read


def _pod_body(pod: PodInfo) -> dict[str, Any]:
    meta = {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid, "labels": dict(pod.labels)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {**meta, "annotations": dict(pod.annotations)}}


_DraftKey = tuple[str, str, str, str, str]  # (grouper, apiVersion, kind, namespace, name)


class _Claims:
    """What the groupers answer, pod by pod: drafts by owner, the pods each gang claimed, the
    pods no grouper claimed (by topmost owner), and the pods that wait."""

    def __init__(self, ris: Mapping[tuple[str, str], ResourceInterface]) -> None:
        self.ris = ris
        self.waiting: dict[str, str] = {}
        self.drafts: dict[_DraftKey, WorkloadDraft | None] = {}
        self.members: dict[tuple[_DraftKey, str], list[ClaimedPod]] = {}
        self.orphans: dict[tuple[str, str, str, str], tuple[Link, list[PodInfo]]] = {}
        self.declined: dict[str, _DraftKey] = {}  # pod -> the ResourceInterface draft that matched it to no leaf
        self.handing_off: dict[str, bool] = {}  # ResourceInterface -> whether it hands off (read once)

    def handlers(self, link: Link) -> list[tuple[str, Grouper]]:
        out: list[tuple[str, Grouper]] = []
        ri = self.ris.get(link.gvk)
        # One that hands off does so whatever the object says: it needs no object to be visible
        # (KAI's generic pod-grouping design: Dynamo -> Grove pods reach the PodCliqueSet below).
        if ri is not None and ri.name not in self.handing_off:
            self.handing_off[ri.name] = hands_off(ri)
        if ri is not None and not self.handing_off[ri.name]:
            out.append((f"ResourceInterface {ri.name}", _ri_grouper(ri)))
        builtin = BUILTIN.get(link.gvk)
        if builtin is not None:
            out.append(("built-in", builtin))
        return out

    def claim(self, pod: PodInfo, chain: list[Link]) -> None:
        """Try the owners from the topmost down; no claim makes the pod an orphan of its top (a gang
        member only if it asks to be one: `fallback.asking`, after `unmatched`)."""
        for i in range(len(chain) - 1, -1, -1):
            link = chain[i]
            found = self.handlers(link)
            if not found:
                continue
            if link.obj is None:
                self.waiting[pod.key] = f"{link.label} is not visible yet; its spec decides the PodGroup"
                return
            for name, grouper in found:
                dkey = (name, *link.gvk, link.namespace, link.ref.name)
                if dkey not in self.drafts:
                    self.drafts[dkey] = grouper(link)
                draft = self.drafts[dkey]
                claim = draft.classify(pod, chain[:i]) if draft is not None else None
                if claim is None and draft is not None and name.startswith("ResourceInterface"):
                    self.declined.setdefault(pod.key, dkey)
                if claim is not None and claim.wait is not None:
                    self.waiting[pod.key] = claim.wait
                    return
                if claim is not None:
                    self.members.setdefault((dkey, claim.gang), []).append(ClaimedPod(pod, claim.part, claim.error))
                    return
        top = chain[-1]
        okey = (top.namespace, *top.gvk, top.ref.name)
        self.orphans.setdefault(okey, (top, []))[1].append(pod)

    def unmatched(self) -> None:
        """Pods a ResourceInterface matched to no leaf while it took others of the same owner
        would land in a second gang with the same key: they join its gang as errors instead,
        which makes the workload Invalid naming them. A lower owner's grouper keeps its pods."""
        taken = {dkey for dkey, _ in self.members if dkey[0].startswith("ResourceInterface")}
        moved: list[tuple[_DraftKey, PodInfo]] = []
        # one pass each (a `not in kept` test made a gang of n pods cost n^2 comparisons)
        for (dkey, gang), ms in list(self.members.items()):
            moves = [self._moves(m.pod, dkey[1:], taken) for m in ms]
            moved += [(self.declined[m.pod.key], m.pod) for m, move in zip(ms, moves, strict=True) if move]
            self.members[(dkey, gang)] = [m for m, move in zip(ms, moves, strict=True) if not move]
        for okey, (top, ps) in list(self.orphans.items()):
            owner = (*top.gvk, top.namespace, top.ref.name)
            moving = [self._moves(p, owner, taken) for p in ps]
            moved += [(self.declined[p.key], p) for p, move in zip(ps, moving, strict=True) if move]
            self.orphans[okey] = (top, [p for p, move in zip(ps, moving, strict=True) if not move])
        for dkey, pod in moved:
            draft = self.drafts[dkey]
            assert draft is not None
            leaves = ", ".join(p.name for g in draft.gangs.values() for p in g.parts)
            why = f"matches no podClassifier of {draft.source} (leaves: {leaves})"
            claim = ClaimedPod(pod, None, FieldError(f"Pod {pod.key}", "metadata.labels", why))
            self.members.setdefault((dkey, next(iter(draft.gangs))), []).append(claim)

    def _moves(self, pod: PodInfo, owner: tuple[str, ...], taken: set[_DraftKey]) -> bool:
        ri = self.declined.get(pod.key)
        return ri is not None and ri in taken and ri[1:] == owner


class _Groups:
    """The Groupings being collected; a key taken twice makes the later group Invalid."""

    def __init__(self) -> None:
        self.groups: dict[str, Grouping] = {}
        self.pod_group: dict[str, str] = {}

    def add(self, grouping: Grouping, pod_keys: list[str]) -> None:
        groups = self.groups
        if grouping.key in groups:
            taken = FieldError(
                grouping.source,
                "metadata.name",
                f"its PodGroup key {grouping.key} is taken by {groups[grouping.key].source}",
            )
            grouping = replace(
                grouping, podgroup=None, errors=(*grouping.errors, taken), key=f"{grouping.key}~{len(groups)}"
            )
        groups[grouping.key] = grouping
        for k in pod_keys:
            self.pod_group[k] = grouping.key


def group_pods(
    pods: Sequence[PodInfo],
    objects: ObjectLookup,
    podgroups: Mapping[str, PodGroupSpec],
    *,
    owner_pods: Mapping[str, PodInfo] | None = None,
) -> GroupingResult:
    """Group every pod; see the module docstring for the order of the rules. OWNER_PODS: the pods
    an owner chain may pass through (a LeaderWorkerSet's leader), when not all are in PODS."""
    ris, warnings = index_resource_interfaces(objects.resource_interfaces())
    chains = _Chains(objects, owner_pods if owner_pods is not None else pods)
    claims = _Claims(ris)
    explicit: dict[str, list[PodInfo]] = {}
    trees = _UpstreamTrees(objects)
    for pod in sorted(pods, key=lambda p: p.key):
        named = explicit_group(pod)
        if named is not None:
            if named in podgroups:
                explicit.setdefault(named, []).append(pod)
            else:
                claims.waiting[pod.key] = f"PodGroup {named} (named by the pod) does not exist yet"
            continue
        if pod.scheduling_group is not None:
            trees.add(pod, claims.waiting)
            continue
        chain = chains.chain(pod)
        if chain and not any(link.gvk in n.PLAIN_OWNERS for link in chain):
            claims.claim(pod, chain)

    claims.unmatched()
    out = _Groups()
    for key, ps in sorted(explicit.items()):
        out.add(_explicit(key, podgroups[key], ps), [p.key for p in ps])
    for (dkey, gang_key), ms in claims.members.items():
        if not ms:
            continue
        workload = claims.drafts[dkey]
        assert workload is not None
        gang = workload.gangs.get(gang_key) or GangDraft(
            gang_key, workload.source, workload.obj, workload.owner, errors=list(workload.errors)
        )
        out.add(assemble(gang, ms), [m.pod.key for m in ms])
    for grouping, pod_keys in trees.groupings():
        out.add(grouping, pod_keys)
    for top, unclaimed in claims.orphans.values():
        ps = asking(top, unclaimed)  # the others are plain pods
        if not ps:
            continue
        owned = [ClaimedPod(p, top.ref.kind.lower()) for p in ps]
        out.add(assemble(fallback(top, ps), owned), [p.key for p in ps])
    return GroupingResult(out.groups, out.pod_group, claims.waiting, tuple(warnings))


class _UpstreamTrees:
    """Pods that name a scheduling.k8s.io PodGroup, by the root of its tree (`upstream.tree`)."""

    def __init__(self, objects: ObjectLookup) -> None:
        self.objects = objects
        self.roots: dict[str, tuple[upstream.Path, list[PodInfo]]] = {}

    def add(self, pod: PodInfo, waiting: dict[str, str]) -> None:
        path = upstream.path_of(pod, self.objects)
        root = path.root
        if path.wait is not None or root is None:
            waiting[pod.key] = path.wait or "its PodGroup is not visible yet"
            return
        self.roots.setdefault(upstream.gang_key(root), (path, []))[1].append(pod)

    def groupings(self) -> list[tuple[Grouping, list[str]]]:
        out = []
        for key, (path, ps) in sorted(self.roots.items()):
            root = path.root
            assert root is not None
            keys = [p.key for p in ps]
            if path.error is not None:
                out.append((Grouping(key=key, podgroup=None, errors=(path.error,), source=root.label), keys))
                continue
            counts: dict[str, int] = {}
            first: dict[str, PodInfo] = {}  # ps is sorted by key
            for p in ps:
                name = p.scheduling_group or ""
                # as many pods as name it, or as its highest index says there are (a webhook sees one)
                counts[name] = max(counts.get(name, 0) + 1, upstream.index_of(p) + 1)
                first.setdefault(name, p)
            annotations = {name: p.annotations for name, p in first.items()}
            tree = upstream.build_tree(root, self.objects, counts, annotations)
            out.append((assemble(tree.draft, upstream.claims(tree, ps)), keys))
        return out


def _explicit(key: str, podgroup: PodGroupSpec, pods: list[PodInfo]) -> Grouping:
    """A PodGroup object's gang. Its misspelt annotation keys made it invalid as it was parsed;
    its unknown ones and its pods' keys are checked here."""
    source = f"PodGroup {key}"
    if len(pods) > MAX_GANG_PODS:
        error = FieldError(source, "metadata.name", f"{len(pods):,} pods name it; {beyond(MAX_GANG_PODS)}")
        return Grouping(key=key, podgroup=None, errors=(error,), source=source)
    errors: list[FieldError] = []
    warnings: list[str] = []
    annotation_keys(podgroup.annotations, source, "", errors, warnings)
    for pod in pods:
        annotation_keys(pod.annotations, f"Pod {pod.key}", "", errors, warnings)
    if errors:
        return Grouping(
            key=key, podgroup=None, errors=said_once(errors), warnings=said_once_text(warnings), source=source
        )
    return Grouping(key=key, podgroup=podgroup, warnings=said_once_text(warnings), source=source)


def _ri_grouper(ri: ResourceInterface) -> Grouper:
    def group(link: Link) -> WorkloadDraft | None:
        return group_with(ri, link)

    return group


__all__ = ["PODGROUP", "Family", "explicit_group", "family_key", "group_pods"]
