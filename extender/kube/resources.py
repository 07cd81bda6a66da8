"""What topogang watches: one Resource per kind, with its API group, versions, plural and scope.

The workload owners come from the grouper's kinds (`extender.grouping.kinds.OWNER_RESOURCES`):
a kind is declared once, where its grouper is.
"""

from __future__ import annotations

from extender.grouping.kinds import OWNER_RESOURCES
from extender.grouping.upstream.objects import RESOURCES as UPSTREAM_GROUPS
from extender.model.resource import Resource


def _r(group: str, versions: str, kind: str, plural: str, namespaced: bool = True) -> Resource:
    return Resource(group, tuple(versions.split()), kind, plural, namespaced)


NODES = _r("", "v1", "Node", "nodes", namespaced=False)
PODS = _r("", "v1", "Pod", "pods")
EVENTS = _r("events.k8s.io", "v1", "Event", "events")  # written, not watched
PRIORITY_CLASSES = _r("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", namespaced=False)
DISRUPTION_BUDGETS = _r("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets")  # preemption's tie-break

PODGROUPS = (
    _r("scheduling.topogang.io", "v1alpha1", "PodGroup", "podgroups"),
    _r("scheduling.run.ai", "v2alpha2", "PodGroup", "podgroups"),  # KAI-Scheduler's
)
TOPOLOGIES = (
    _r("scheduling.topogang.io", "v1alpha1", "Topology", "topologies", namespaced=False),
    _r("kai.scheduler", "v1alpha1", "Topology", "topologies", namespaced=False),
    _r("kueue.x-k8s.io", "v1beta2 v1beta1 v1alpha1", "Topology", "topologies", namespaced=False),
)
RESOURCE_FLAVORS = (_r("kueue.x-k8s.io", "v1beta2 v1beta1", "ResourceFlavor", "resourceflavors", namespaced=False),)
QUEUES = (
    _r("scheduling.run.ai", "v2", "Queue", "queues", namespaced=False),  # KAI-Scheduler's
    _r("kueue.x-k8s.io", "v1beta2 v1beta1", "LocalQueue", "localqueues"),
)
RESOURCE_INTERFACES = (
    _r("scheduling.topogang.io", "v1alpha1", "ResourceInterface", "resourceinterfaces", namespaced=False),
)

# Dynamic Resource Allocation: devices per node, classes, claims and the templates of claims to be.
DRA = (
    _r("resource.k8s.io", "v1", "ResourceSlice", "resourceslices", namespaced=False),
    _r("resource.k8s.io", "v1", "DeviceClass", "deviceclasses", namespaced=False),
    _r("resource.k8s.io", "v1", "ResourceClaim", "resourceclaims"),
    _r("resource.k8s.io", "v1", "ResourceClaimTemplate", "resourceclaimtemplates"),
)

# The owners the pod grouper walks from a pod up to its workload.
OWNERS = OWNER_RESOURCES

# Everything the cluster cache watches, nodes and pods first.
WATCHED: tuple[Resource, ...] = (
    NODES,
    PODS,
    PRIORITY_CLASSES,
    DISRUPTION_BUDGETS,
    *PODGROUPS,
    *TOPOLOGIES,
    *RESOURCE_INTERFACES,
    *RESOURCE_FLAVORS,
    *QUEUES,
    *DRA,
    *OWNERS,
    *UPSTREAM_GROUPS,  # Kubernetes' own PodGroups and CompositePodGroups (stored as objects)
)

__all__ = [
    "DRA",
    "EVENTS",
    "NODES",
    "OWNERS",
    "PODGROUPS",
    "PODS",
    "PRIORITY_CLASSES",
    "QUEUES",
    "RESOURCE_FLAVORS",
    "RESOURCE_INTERFACES",
    "TOPOLOGIES",
    "UPSTREAM_GROUPS",
    "WATCHED",
    "Resource",
]
