"""Which gang each pod belongs to, and the gang's tree, kept current incrementally.

The grouper (`extender.grouping`) decides gangs: a pod joins the PodGroup object it names
(`pod-group-name` annotation, `scheduling.x-k8s.io/pod-group` label), else the gang its owner
workload defines (TFJob, LeaderWorkerSet, ... or a ResourceInterface). Grouping every pod again
on every change would cost O(pods) per event, so pods are kept in *families* (those naming one
PodGroup, or sharing the top of their owner chain) and only the families touched by a change are
grouped again. ClusterState reports changes through `subscribe`; work is done lazily, on the
next question.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from extender.core.cluster import ClusterState
from extender.grouping import PODGROUP, Family, Grouping, family_key, group_pods
from extender.grouping.expected import Expected, expected_pods, slot_of, subgroups_with
from extender.grouping.upstream import tree as upstream
from extender.grouping.upstream.objects import GROUP as UPSTREAM_GROUP
from extender.model.errors import FieldError, said_once, said_once_text
from extender.model.flavor import flavor_topology
from extender.model.keys import GroupKey
from extender.model.pod import PLAN_GENERATION_ANNOTATION, OwnerRef, PodInfo
from extender.model.podgroup import PodGroupSpec
from extender.placement import BuiltGang, build_gang


@dataclass(frozen=True)
class GroupView:
    """A gang as the scheduler sees it at one moment."""

    key: str
    spec: PodGroupSpec | None
    built: BuiltGang | None  # None while the group has errors that stop it being built
    errors: tuple[FieldError, ...] = ()
    warnings: tuple[str, ...] = ()
    priority: int = 0
    created: float | None = None
    pods: tuple[str, ...] = ()
    source: str = ""
    waiting: Mapping[str, str] = field(default_factory=dict)  # pod -> why it waits outside the gang
    owner: OwnerRef | None = None  # the workload a derived gang comes from; None for PodGroup objects
    # Stand-ins for pods not created yet that the gang counts (grouping/expected.py: a JobSet
    # Job's followers, created only once its leader is scheduled), by key; not in `pods`.
    expected: Mapping[str, PodInfo] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return self.built is not None and self.built.gang is not None and not self.errors

    @property
    def message(self) -> str:
        return "; ".join(str(e) for e in self.errors)


class _Lookup:
    """The grouper's ObjectLookup over ClusterState's owners and ResourceInterfaces."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        return self.state.objects.get((api_version.rpartition("/")[0], kind, namespace or "", name))

    def resource_interfaces(self) -> Sequence[Mapping[str, Any]]:
        return list(self.state.resource_interfaces.values())

    def in_namespace(self, api_version: str, kind: str, namespace: str) -> Sequence[Mapping[str, Any]]:
        return self.state.in_namespace(api_version, kind, namespace)


def _signature(pod: PodInfo) -> tuple[object, ...]:
    """What grouping reads of a pod besides its existence. topogang's own plan-generation
    annotation is left out: every nomination writes it, and a gang is not regrouped for that."""
    notes = tuple(sorted((k, v) for k, v in pod.annotations.items() if k != PLAN_GENERATION_ANNOTATION))
    return (tuple(sorted(pod.labels.items())), notes, pod.owner_refs)


def _tree_signature(pod: PodInfo) -> tuple[object, ...]:
    """What a gang's tree and view read of a member: a change elsewhere (its phase while it
    runs, its nominated node, a condition) leaves the built view as it is."""
    return (
        pod.node_name,
        pod.terminal,
        pod.deleting,
        pod.held,
        pod.requests,
        pod.placement,
        pod.priority,
        pod.priority_class_name,
        pod.created,
        pod.device_errors,
        pod.device_warnings,
    )


class Membership:
    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.lookup = _Lookup(state)
        self._family: dict[str, Family | None] = {}  # pod -> family (None: a plain pod)
        self._families: dict[Family, set[str]] = {}  # family -> pods
        self._signature: dict[str, tuple[object, ...]] = {}
        self._tree: dict[str, tuple[object, ...]] = {}  # pod -> _tree_signature when last seen
        self._readers: dict[tuple[str, str, str], set[str]] = {}  # owner read -> pods whose chain read it
        self._reads: dict[str, tuple[tuple[str, str, str], ...]] = {}
        self._groupings: dict[Family, list[Grouping]] = {}  # family -> its gangs
        self._exclusive: set[str] = set()  # gangs with an exclusive constraint, read from their specs
        self._family_waiting: dict[Family, dict[str, str]] = {}
        self._group_of: dict[str, str] = {}
        self._group_family: dict[str, Family] = {}
        self._views: dict[str, GroupView] = {}
        self._expected: dict[str, dict[str, Expected]] = {}  # group -> its stand-ins last made (view)
        self._dirty_pods: set[str] = set(state.pods)
        self._dirty_readers: set[str] = set()  # pods that read an object that changed
        self._rekey: set[str] = set()  # pods whose family may have changed with an object (a new root)
        self._dirty_families: set[Family] = set()
        self._all_dirty = False
        # Counted as each pod changes, so that a gang still short of pods is answered without
        # grouping and building it again: the pods of each family that would be members (not
        # held, not finished or leaving), and the families of flat PodGroups last found short,
        # with the spec that said how many pods they need (`still_short`).
        self._present: dict[Family, set[str]] = {}
        self._short: dict[Family, tuple[PodGroupSpec, int]] = {}
        state.subscribe(self._changed)

    # -- change feed ----------------------------------------------------------------------------

    def _changed(self, kind: str, key: object) -> None:
        if kind == "pod":
            assert isinstance(key, str)
            self._dirty_pods.add(key)
            pod = GroupKey.parse(key)
            self._dirty_pods.update(self._readers.get(("Pod", pod.namespace, pod.name), ()))
        elif kind == "object":
            assert isinstance(key, tuple)
            group, obj_kind, ns, name = key
            readers = self._readers.get((obj_kind, ns, name), set())
            if group == UPSTREAM_GROUP:  # any group of a tree changes the tree's gang, and its root
                root = upstream.root_name(self.lookup, obj_kind, ns, name)
                readers = readers | self._readers.get((upstream.TREE, ns, root), set())
                self._rekey.update(readers)
            self._dirty_pods.update(readers)
            # their pods unchanged, their gangs' trees may not be (a PodGang, an owner's spec)
            self._dirty_readers.update(readers)
        elif kind == "podgroup":
            family = Family(PODGROUP, GroupKey.parse(str(key)))
            self._dirty_families.add(family)
            self._short.pop(family, None)
            self._views.pop(str(key), None)
        elif kind == "resource_interface":
            self._all_dirty = True
            self._short.clear()
        elif kind not in ("node", "devices", "budget"):  # topologies, priority classes: every tree or priority
            # may change (devices change pods' requests: those come as pod events; budgets no gang)
            self._views.clear()  # (a node changes no tree: gangs are built from specs and topologies)
            self._short.clear()

    def _sync(self) -> None:
        self._sync_pods()
        for family in self._dirty_families:
            self._regroup(family)
        self._dirty_families.clear()

    def _sync_pods(self) -> None:
        """Each changed pod's family (O(pods changed)); the families touched are marked dirty,
        to be grouped again by `_sync`."""
        _ = self.state.table  # pods whose claims or devices changed are counted again first
        if self._all_dirty:
            self._all_dirty = False
            self._dirty_families.update(self._families)
        pods = self.state.pods
        for key in self._dirty_pods:
            pod = pods.get(key)
            old = self._family.get(key)
            self._count(key, old, None)
            same = key not in self._rekey and self._signature.get(key) == _signature(pod) if pod is not None else False
            if pod is not None and key in self._family and same:
                self._count(key, old, pod)
                if old is not None:  # same family; its tree may still change (bound, requests)
                    tree = _tree_signature(pod)
                    if self._tree.get(key) != tree:
                        self._tree[key] = tree
                        self._views.pop(self._group_of.get(key, ""), None)
                    if key in self._family_waiting.get(old, {}) or key not in self._group_of:
                        self._dirty_families.add(old)
                continue
            if old is not None:
                self._families.get(old, set()).discard(key)
                self._dirty_families.add(old)
            for read in self._reads.pop(key, ()):
                self._readers.get(read, set()).discard(key)
            if pod is None:
                self._family.pop(key, None)
                self._signature.pop(key, None)
                self._tree.pop(key, None)
                continue
            family, reads = family_key(pod, self.lookup, pods)
            self._family[key] = family
            self._signature[key] = _signature(pod)
            self._tree[key] = _tree_signature(pod)
            self._reads[key] = reads
            for read in reads:
                self._readers.setdefault(read, set()).add(key)
            if family is not None:
                self._families.setdefault(family, set()).add(key)
                self._dirty_families.add(family)
                self._count(key, family, pod)
        self._dirty_pods.clear()
        self._rekey.clear()
        for key in self._dirty_readers:
            if (family := self._family.get(key)) is not None:
                self._dirty_families.add(family)
                self._short.pop(family, None)  # an object its pods read changed: judge it whole again
        self._dirty_readers.clear()

    def _count(self, key: str, family: Family | None, pod: PodInfo | None) -> None:
        """Keep KEY in FAMILY's present pods when POD would be a member (None: it left the family)."""
        if family is None:
            return
        present = self._present.setdefault(family, set())
        if pod is None or pod.terminal or pod.deleting or (pod.scheduling_gates and pod.held):
            present.discard(key)
        else:
            present.add(key)

    def short(self, group: str, needed: int) -> None:
        """GROUP, a PodGroup of pods without SubGroups, was judged whole and found short of pods:
        it needs NEEDED. Until that changes, `still_short` answers its members without grouping
        and building the gang again for each one (O(pods) a member, O(pods^2) a gang)."""
        spec = self.state.podgroups.get(group)
        family = self._group_family.get(group)
        if spec is None or spec.subgroups or family is None or family.podgroup != group:
            return
        self._short[family] = (spec, needed)

    def still_short(self, pod_key: str) -> tuple[str, int, int] | None:
        """(gang, pods present, pods needed) when POD_KEY's gang was found short of pods and,
        counting its pods as they came, still is; None: ask the whole question."""
        if not self._short:
            return None
        self._sync_pods()
        pod = self.state.pods.get(pod_key)
        if pod is None or pod.device_errors:  # (its errors make the gang invalid: the whole question)
            return None
        family = self._family.get(pod_key)
        found = self._short.get(family) if family is not None else None
        if found is None or family is None:
            return None
        spec, needed = found
        group = str(family.key)
        present = len(self._present.get(family, ()))
        if self.state.podgroups.get(group) is not spec or present >= needed:
            del self._short[family]
            return None
        return group, present, needed

    def _regroup(self, family: Family) -> None:
        for grouping in self._groupings.pop(family, []):
            self._exclusive.discard(grouping.key)
            self._group_family.pop(grouping.key, None)
            self._views.pop(grouping.key, None)
        for pod_key in self._family_waiting.pop(family, {}):
            if self._family.get(pod_key) == family:  # not a pod that moved to another family since
                self._group_of.pop(pod_key, None)
        members = [self.state.pods[k] for k in sorted(self._families.get(family, ())) if k in self.state.pods]
        for p in members:
            self._group_of.pop(p.key, None)
        if not members:
            self._families.pop(family, None)
            return
        if (key := family.podgroup) is not None and key in self.state.invalid_podgroups:
            errors = self.state.invalid_podgroups[key]
            grouping = Grouping(key=key, podgroup=None, errors=errors, source=f"PodGroup {key}")
            self._install(family, [grouping], {key: [p.key for p in members]}, {})
            return
        result = group_pods(members, self.lookup, self.state.podgroups)
        by_group: dict[str, list[str]] = {}
        for pod_key, group in result.pod_group.items():
            by_group.setdefault(group, []).append(pod_key)
        self._install(family, list(result.groups.values()), by_group, dict(result.waiting))

    def _install(
        self, family: Family, groupings: list[Grouping], pods: Mapping[str, list[str]], waiting: dict[str, str]
    ) -> None:
        self._groupings[family] = groupings
        self._family_waiting[family] = waiting
        for g in groupings:
            if g.podgroup is not None and _has_exclusive(g.podgroup):
                self._exclusive.add(g.key)
            self._group_family[g.key] = family
            self._views.pop(g.key, None)
            for pod_key in pods.get(g.key, ()):
                self._group_of[pod_key] = g.key
        for group in [g for g in self._expected if g not in self._group_family]:
            del self._expected[group]  # the stand-ins of gangs gone (only leader-first gangs have any)

    # -- questions --------------------------------------------------------------------------------

    def group_of(self, pod: str) -> str | None:
        self._sync()
        return self._group_of.get(pod)

    def waiting(self, pod: str) -> str | None:
        """Why a pod that belongs to a gang-to-be cannot be grouped yet (its PodGroup or owner is
        not visible); None otherwise."""
        self._sync()
        family = self._family.get(pod)
        return self._family_waiting.get(family, {}).get(pod) if family else None

    def read(self, kind: str, namespace: str, name: str) -> bool:
        """Whether grouping some pod read this object: an owner on its chain, or an object its
        grouper reads besides (a Grove PodGang)."""
        self._sync_pods()
        return bool(self._readers.get((kind, namespace, name)))

    def families(self) -> set[Family]:
        """The families that have pods: a PodGroup's, or a top owner's."""
        self._sync()
        return {f for f, pods in self._families.items() if pods}

    def groups(self) -> list[str]:
        self._sync()
        return sorted(self._group_family)

    def exclusive_groups(self) -> list[str]:
        """Gangs with an exclusive constraint (LeaderWorkerSet), known without building them."""
        self._sync()
        return sorted(self._exclusive)

    def has(self, group: str) -> bool:
        """Whether some pod belongs to GROUP."""
        self._sync()
        return group in self._group_family

    def members(self, group: str) -> list[str]:
        self._sync()
        return sorted(k for k, g in self._group_of.items() if g == group)

    def slot(self, pod: str) -> str | None:
        """The stand-in (GroupView.expected) whose place POD takes, if POD is a follower whose
        controller creates it only once its leader is scheduled (grouping/expected.py)."""
        self._sync()
        group = self._group_of.get(pod)
        family = self._group_family.get(group) if group is not None else None
        grouping = next((g for g in self._groupings.get(family, []) if g.key == group), None) if family else None
        info = self.state.pods.get(pod)
        return slot_of(info, grouping) if grouping is not None and info is not None else None

    def view(self, group: str, assumed: Mapping[str, str] | None = None) -> GroupView:
        """The group's tree with its pods; `assumed` pins pods to reserved nodes (not cached)."""
        self._sync()
        if not assumed and group in self._views:
            return self._views[group]
        family = self._group_family.get(group)
        grouping = next((g for g in self._groupings.get(family, []) if g.key == group), None) if family else None
        state = self.state
        keys = [k for k in self._families.get(family, ()) if self._group_of.get(k) == group] if family else []
        pods = [state.pods[k] for k in sorted(keys) if k in state.pods]
        if assumed:
            pods = [_assume(p, assumed.get(p.key)) for p in pods]
        priority = max((state.pod_priority(p) for p in pods), default=0)
        created = min((p.created for p in pods if p.created is not None), default=None)
        if grouping is None or grouping.podgroup is None or grouping.errors:
            errors = grouping.errors if grouping is not None else ()
            if not errors:
                errors = (FieldError(f"PodGroup {group}", "metadata.name", "not found"),)
            view = GroupView(
                group,
                None,
                None,
                errors,
                priority=priority,
                created=created,
                pods=tuple(p.key for p in pods),
                source=grouping.source if grouping else "",
                owner=grouping.owner if grouping else None,
            )
        else:
            spec = grouping.podgroup
            differ: tuple[str, ...] = ()
            if spec.priority is not None:  # the group's own (Kubernetes' PodGroup), as kube-scheduler reads it
                priority = spec.priority
                differ = _priority_differs(spec.priority, [(p.key, state.pod_priority(p)) for p in pods])
            elif spec.priority_class_name and (value := state.class_priority(spec.priority_class_name)) is not None:
                priority = max(priority, value)
            # A pod held by a scheduling gate (Kueue's, a user's) is not present: it cannot be
            # scheduled, so counting it would plan and hold room for a gang that cannot bind. It
            # joins the gang once its gates are gone. topogang's own gate (gates mode) is the
            # exception: topogang lifts it once the gang is planned, so those pods must count.
            present = [p for p in pods if not p.held]
            stand_ins, subgroup_of, order = self._stand_ins(group, grouping, present, assumed)
            built = build_gang(
                spec,
                [*present, *stand_ins],
                state.topologies,
                order=order,
                subgroup_of=subgroup_of,
                default_topology=flavor_topology(pods, state.flavors.values()),
            )
            # Claims that ask for a class that does not exist, a selector that does not compile,
            # more devices than any node has: errors of the gang, named in its status and Events,
            # each said once however many pods share it.
            device_errors = [e for p in present for e in p.device_errors]
            device_warnings = [w for p in present for w in p.device_warnings]
            view = GroupView(
                group,
                spec,
                built,
                said_once((*built.errors, *device_errors)),
                warnings=said_once_text(
                    (*grouping.warnings, *built.warnings, *_gated(pods), *device_warnings, *differ)
                ),
                priority=priority,
                created=spec.created if spec.created is not None else created,
                pods=tuple(p.key for p in pods),
                source=grouping.source,
                waiting=built.stray,
                owner=grouping.owner,
                expected={p.key: p for p in stand_ins},
            )
        if not assumed:
            self._views[group] = view
        return view

    def _stand_ins(
        self, group: str, grouping: Grouping, present: list[PodInfo], assumed: Mapping[str, str] | None
    ) -> tuple[list[PodInfo], Mapping[str, str], Mapping[str, int]]:
        """Followers their controller creates only once their leader is scheduled count before
        they exist (grouping/expected.py), so that the leaders are planned and bound under the
        whole gang's plan: their stand-ins (pinned to ASSUMED nodes), and every member's leaf
        SubGroup and index, theirs included."""
        expected = expected_pods(grouping, present, self._expected.get(group))
        if not assumed:
            self._expected[group] = expected
        subgroup_of, order = subgroups_with(grouping, expected)
        return [_assume(e.pod, assumed.get(k)) if assumed else e.pod for k, e in expected.items()], subgroup_of, order


def _gated(pods: Sequence[PodInfo]) -> tuple[str, ...]:
    """The note on a gang whose pods wait behind scheduling gates (they are not counted)."""
    gated = [p for p in pods if p.held]
    if not gated:
        return ()
    gates = sorted({g for p in gated for g in p.held})
    return (f"{len(gated)} pod(s) held by scheduling gate(s) {', '.join(gates)}, not counted until released",)


def _has_exclusive(spec: PodGroupSpec) -> bool:
    constraints = [
        spec.global_constraint,
        *spec.subgroup_constraints.values(),
        *(s.constraint for s in spec.subgroup_sets),
    ]
    return any(c is not None and c.exclusive for c in constraints)


def _priority_differs(group: int, pods: list[tuple[str, int]]) -> tuple[str, ...]:
    """kube-scheduler 1.37 schedules no pod of a Kubernetes PodGroup whose priority is not the
    group's ("all pods in a single pod group should have the same priority"): say which differ."""
    odd = sorted((k, v) for k, v in pods if v != group)
    if not odd:
        return ()
    shown = ", ".join(f"{k} has {v}" for k, v in odd[:3]) + (f" and {len(odd) - 3} more" if len(odd) > 3 else "")
    return (
        f"the PodGroup's priority is {group} but {shown}: kube-scheduler schedules no pod of a group whose pods'"
        " priority differs from the group's (give the pods the group's priorityClassName)",
    )


def _assume(pod: PodInfo, node: str | None) -> PodInfo:
    """The pod as if bound to its reserved node, so a re-plan keeps it where it is."""
    if node is None or pod.node_name is not None:
        return pod
    return replace(pod, node_name=node)
