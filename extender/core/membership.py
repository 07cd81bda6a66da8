"""Which gang each pod belongs to, and the gang's tree, cached until their inputs change.

A pod joins the PodGroup object named by its `pod-group-name` annotation or its
`scheduling.x-k8s.io/pod-group` label. Pods with neither are plain pods: kube-scheduler places
them as usual.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from extender.core.cluster import ClusterState
from extender.model.errors import FieldError
from extender.model.labels import POD_GROUP_ANNOTATION, POD_GROUP_LABEL
from extender.model.pod import PodInfo
from extender.model.podgroup import PodGroupSpec
from extender.placement.build import BuiltGang, build_gang


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

    @property
    def valid(self) -> bool:
        return self.built is not None and self.built.gang is not None and not self.errors

    @property
    def message(self) -> str:
        return "; ".join(str(e) for e in self.errors)


def explicit_group(pod: PodInfo) -> str | None:
    name = pod.annotations.get(POD_GROUP_ANNOTATION) or pod.labels.get(POD_GROUP_LABEL)
    return f"{pod.namespace}/{name}" if name else None


class Membership:
    """Pod -> group key, and group key -> GroupView, recomputed when the cluster version moves."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._version = -1
        self._group_of: dict[str, str] = {}
        self._members: dict[str, list[str]] = {}
        self._views: dict[str, GroupView] = {}

    def _refresh(self) -> None:
        if self._version == self.state.version:
            return
        self._version = self.state.version
        self._group_of.clear()
        self._members.clear()
        self._views.clear()
        for pod in self.state.pods.values():
            key = explicit_group(pod)
            if key is not None:
                self._group_of[pod.key] = key
                self._members.setdefault(key, []).append(pod.key)

    def group_of(self, pod: str) -> str | None:
        self._refresh()
        return self._group_of.get(pod)

    def groups(self) -> list[str]:
        self._refresh()
        return sorted(set(self._members) | set(self.state.podgroups) | set(self.state.invalid_podgroups))

    def members(self, group: str) -> list[str]:
        self._refresh()
        return list(self._members.get(group, ()))

    def view(self, group: str, assumed: Mapping[str, str] | None = None) -> GroupView:
        """The group's tree with its pods; `assumed` pins pods to reserved nodes (not cached)."""
        self._refresh()
        if not assumed and group in self._views:
            return self._views[group]
        state = self.state
        pods = [state.pods[k] for k in self._members.get(group, ()) if k in state.pods]
        if assumed:
            pods = [_assume(p, assumed.get(p.key)) for p in pods]
        priority = max((state.pod_priority(p) for p in pods), default=0)
        created = min((p.created for p in pods if p.created is not None), default=None)
        spec = state.podgroups.get(group)
        if spec is None:
            errors = state.invalid_podgroups.get(group)
            if errors is None:
                ns, _, name = group.partition("/")
                errors = (FieldError(f"PodGroup {group}", "metadata.name", f"PodGroup {name} not found in {ns}"),)
            view = GroupView(
                group, None, None, errors, priority=priority, created=created, pods=tuple(p.key for p in pods)
            )
        else:
            if spec.priority_class_name in state.priority_classes:
                priority = max(priority, state.priority_classes[spec.priority_class_name])
            built = build_gang(spec, pods, state.topologies)
            view = GroupView(
                group,
                spec,
                built,
                built.errors,
                priority=priority,
                created=spec.created if spec.created is not None else created,
                pods=tuple(p.key for p in pods),
                source=f"PodGroup {group}",
                waiting=built.stray,
            )
        if not assumed:
            self._views[group] = view
        return view


def _assume(pod: PodInfo, node: str | None) -> PodInfo:
    """The pod as if bound to its reserved node, so a re-plan keeps it where it is."""
    if node is None or pod.node_name is not None:
        return pod
    return replace(pod, node_name=node)
