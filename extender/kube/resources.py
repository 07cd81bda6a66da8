"""What topogang watches: one Resource per kind, with its API group, versions, plural and scope.

A Resource lists its versions in order of preference; the informer lists the first one the API
server serves (Kueue's Topology is v1beta2 in new releases, v1beta1 and v1alpha1 in older ones),
so a kind served in several versions is still watched once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core API
    versions: tuple[str, ...]  # preferred first
    kind: str
    plural: str
    namespaced: bool

    @property
    def name(self) -> str:
        """'pods', 'podgroups.scheduling.topogang.io': the name a CRD has, for logs."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version

    def collection_path(self, version: str, namespace: str | None = None) -> str:
        """Where to list and watch: every namespace unless `namespace` is given."""
        base = f"/apis/{self.group}/{version}" if self.group else f"/api/{version}"
        if namespace and self.namespaced:
            return f"{base}/namespaces/{namespace}/{self.plural}"
        return f"{base}/{self.plural}"

    def object_path(self, version: str, name: str, namespace: str | None = None, subresource: str = "") -> str:
        if self.namespaced and not namespace:
            raise ValueError(f"{self.kind} {name}: a namespaced object needs a namespace")
        path = f"{self.collection_path(version, namespace)}/{name}"
        return f"{path}/{subresource}" if subresource else path


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
RESOURCE_INTERFACES = (
    _r("scheduling.topogang.io", "v1alpha1", "ResourceInterface", "resourceinterfaces", namespaced=False),
)

# The owners the pod grouper walks from a pod up to its workload.
OWNERS = (
    _r("batch", "v1", "Job", "jobs"),
    _r("apps", "v1", "StatefulSet", "statefulsets"),
    _r("apps", "v1", "ReplicaSet", "replicasets"),
    _r("kubeflow.org", "v1", "TFJob", "tfjobs"),
    _r("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs"),
    _r("kubeflow.org", "v1", "JAXJob", "jaxjobs"),
    _r("kubeflow.org", "v1", "XGBoostJob", "xgboostjobs"),
    _r("kubeflow.org", "v2beta1", "MPIJob", "mpijobs"),
    _r("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "leaderworkersets"),
    _r("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
    _r("ray.io", "v1", "RayCluster", "rayclusters"),
    _r("ray.io", "v1", "RayJob", "rayjobs"),
)

# Everything the cluster cache watches, nodes and pods first.
WATCHED: tuple[Resource, ...] = (
    NODES,
    PODS,
    PRIORITY_CLASSES,
    DISRUPTION_BUDGETS,
    *PODGROUPS,
    *TOPOLOGIES,
    *RESOURCE_INTERFACES,
    *OWNERS,
)
