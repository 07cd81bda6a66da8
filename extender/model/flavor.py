"""Kueue's ResourceFlavor (Kueue's TAS KEP), the parts placement reads: which Topology its nodes form
and the node labels that admit a pod to it (Kueue puts them in the pod's nodeSelector).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from extender.model.pod import PodInfo
from extender.model.raw import identify, mapping, opt_str, str_map

RESOURCE_FLAVOR_API_VERSIONS = frozenset({"kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2"})


@dataclass(frozen=True)
class ResourceFlavor:
    name: str
    topology: str | None  # spec.topologyName
    node_labels: tuple[tuple[str, str], ...]  # spec.nodeLabels, sorted

    def admits(self, pod: PodInfo) -> bool:
        """Whether the pod was admitted to this flavor: its nodeSelector holds every node label."""
        if not self.node_labels:
            return False
        selector = dict(pod.placement.node_selector)
        return all(selector.get(k) == v for k, v in self.node_labels)


def parse_resource_flavor(body: Mapping[str, Any]) -> ResourceFlavor:
    """Raise InvalidObject naming the field when the ResourceFlavor cannot be read."""
    _, name, _, errors = identify(dict(body), "ResourceFlavor")
    spec = mapping(body.get("spec"), "spec", errors)
    topology = opt_str(spec.get("topologyName"), "spec.topologyName", errors) or None
    labels = str_map(spec.get("nodeLabels"), "spec.nodeLabels", errors)
    if topology and not labels and not spec.get("nodeLabels"):
        # Kueue's TAS KEP requires one: without it the flavor would match every node.
        errors.add("spec.nodeLabels", f"a flavor with spec.topologyName ({topology}) needs at least one node label")
    errors.raise_if_any()
    return ResourceFlavor(name, topology, tuple(sorted(labels.items())))


def flavor_topology(pods: Iterable[PodInfo], flavors: Iterable[ResourceFlavor]) -> str | None:
    """The Topology of the flavor most of the pods were admitted to (ties by Topology name), if it
    names one: the gang's Topology when its PodGroup names none."""
    with_topology = sorted((f for f in flavors if f.topology), key=lambda f: f.name)
    if not with_topology:
        return None
    votes: Counter[str] = Counter()
    for pod in pods:
        flavor = next((f for f in with_topology if f.admits(pod)), None)
        if flavor is not None and flavor.topology is not None:
            votes[flavor.topology] += 1
    return min(votes, key=lambda t: (-votes[t], t)) if votes else None
