"""What the simulation used of its input, and a warning for each object it could not use; and
which workloads get pods made (none whose pods are given, or made by a controller given too).

Nodes, Pods, PodGroups, Topologies, priority classes, queues and DRA objects are read for what
they are (`core.apply`). Any other object is kept as a possible owner of pods; it is used when
its pods were made from it (a workload topogang can synthesize), when a synthesis read it (a
TrainJob's runtime), or when some pod reaches it: on its chain of controller ownerReferences, or
through what its grouper reads besides (a Grove PodGang, a scheduling.k8s.io PodGroup a pod
names). Every other object would vanish without a word: a TFJob of a kubeflow.org version
topogang does not read, a CRD it does not know, a Service. Each is named in a warning that says
what to give instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence, Set

from extender.core.cluster import ClusterState, ObjectKey, object_key
from extender.core.lookup import Lookup
from extender.grouping import can_synthesize, synthesized_versions
from extender.grouping.values import controller_ref
from extender.model.pod import PodInfo
from extender.simulate.loader import Loaded

MAX_CHAIN = 16  # owner chains are short; this only stops a cycle of ownerReferences
SHOWN = 6  # names listed in one line before "and N more"

# API groups of Kubernetes itself whose objects never make pods (the core group's Services,
# ConfigMaps, Secrets...; RBAC; networking; storage): read by nothing here, said in one line.
NO_PODS_GROUPS = frozenset(
    {
        "",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
        "autoscaling",
        "certificates.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "networking.k8s.io",
        "node.k8s.io",
        "policy",
        "rbac.authorization.k8s.io",
        "storage.k8s.io",
    }
)
# Other projects' objects that make no pods (what a cluster's manifests often hold beside workloads).
NO_PODS_KINDS = frozenset(
    {
        ("grove.io", "ClusterTopologyBinding"),
        ("kueue.x-k8s.io", "AdmissionCheck"),
        ("kueue.x-k8s.io", "ClusterQueue"),
        ("kueue.x-k8s.io", "Cohort"),
        ("kueue.x-k8s.io", "WorkloadPriorityClass"),
        ("cert-manager.io", "Certificate"),
        ("cert-manager.io", "Issuer"),
        ("cert-manager.io", "ClusterIssuer"),
        ("monitoring.coreos.com", "ServiceMonitor"),
        ("trainer.kubeflow.org", "ClusterTrainingRuntime"),  # read for the TrainJobs that name them
        ("trainer.kubeflow.org", "TrainingRuntime"),
    }
)
UPSTREAM_GANGS = {("scheduling.k8s.io", "PodGroup"), ("scheduling.k8s.io", "CompositePodGroup")}

# What to give instead, for kinds whose pods come through another object topogang reads.
INSTEAD = {
    ("batch", "CronJob"): "a CronJob makes a Job at each run: give that Job, or its pods",
    ("apps", "DaemonSet"): "a DaemonSet runs one pod on each node: give those pods as running (spec.nodeName)"
    " to count the room they take",
}


def owner_chains(state: ClusterState, pods: Iterable[PodInfo]) -> set[ObjectKey]:
    """Every object on the controller chains of PODS, as far as the objects are in STATE."""
    out: set[ObjectKey] = set()
    for pod in pods:
        ref, namespace = pod.controller, pod.namespace
        for _ in range(MAX_CHAIN):
            if ref is None:
                break
            if (ref.api_version, ref.kind) == ("v1", "Pod"):  # a LeaderWorkerSet's leader owns its workers
                owner_pod = state.pods.get(f"{namespace}/{ref.name}")
                ref = owner_pod.controller if owner_pod is not None else None
                continue
            key = object_key(ref.api_version, ref.kind, namespace, ref.name)
            if key in out:
                break
            out.add(key)
            body = state.objects.get(key)
            ref = controller_ref(body) if body is not None else None
    return out


def replicaset_owners(objects: Iterable[Loaded]) -> set[ObjectKey]:
    """The controllers (Deployments) of the ReplicaSets among OBJECTS."""
    out: set[ObjectKey] = set()
    for obj in objects:
        if obj.kind == "ReplicaSet" and (ref := controller_ref(obj.body)) is not None:
            out.add(object_key(ref.api_version, ref.kind, key_of(obj)[2], ref.name))
    return out


def owned_by_pod(obj: Loaded) -> bool:
    ref = controller_ref(obj.body)
    return ref is not None and (ref.api_version, ref.kind) == ("v1", "Pod")


def made_by_controller(obj: Loaded, given: Set[ObjectKey], pods: Set[str]) -> bool:
    """Whether OBJ's pods come from its controller, not from OBJ: a workload given too whose
    synthesis makes them (a JobSet's Job, a LeaderWorkerSet's StatefulSet), or a pod given or
    made (a LeaderWorkerSet leader's StatefulSet of workers). A Deployment's ReplicaSet makes
    its own: the Deployment is the one left out (`replicaset_owners`)."""
    ref = controller_ref(obj.body)
    if ref is None:
        return False
    namespace = key_of(obj)[2]
    if (ref.api_version, ref.kind) == ("v1", "Pod"):
        return f"{namespace}/{ref.name}" in pods
    if (obj.kind, ref.kind) == ("ReplicaSet", "Deployment"):
        return False
    return (
        can_synthesize(ref.api_version, ref.kind)
        and object_key(ref.api_version, ref.kind, namespace, ref.name) in given
    )


def key_of(obj: Loaded) -> ObjectKey:
    meta = obj.body.get("metadata") or {}
    return object_key(obj.api_version, obj.kind, meta.get("namespace") or "default", str(meta.get("name") or ""))


def unused(objects: Sequence[Loaded], state: ClusterState, lookup: Lookup, used: Set[ObjectKey]) -> list[str]:
    """A warning for each object of OBJECTS that nothing used (USED: the objects pods were made
    from, and those on the pods' owner chains); the objects of Kubernetes' own kinds that never
    make pods, in one line."""
    out: list[str] = []
    ignored: list[str] = []
    first: dict[ObjectKey, Loaded] = {}
    latest = {key_of(obj): obj for obj in objects}
    for obj in objects:
        key = key_of(obj)
        group, kind, namespace, name = key
        if obj.kind != "Pod" and (earlier := first.setdefault(key, obj)) is not obj:
            out.append(f"{earlier.source}: {label(obj)} is given again at {obj.source}, which replaces it")
        if latest[key] is not obj or key not in state.objects or key in used:
            continue
        if lookup.read_by_pods(kind, namespace, name):
            continue
        if group in NO_PODS_GROUPS or (group, kind) in NO_PODS_KINDS:
            ignored.append(label(obj))
        else:
            out.append(f"{obj.source}: {_advice(obj, key)}")
    if ignored:
        more = f" and {len(ignored) - SHOWN} more" if len(ignored) > SHOWN else ""
        out.append(f"not read by the simulator: {', '.join(ignored[:SHOWN])}{more}")
    return out


def label(obj: Loaded) -> str:
    """The object as its input names it: `Kind namespace/name`, or `Kind name` without a namespace."""
    meta = obj.body.get("metadata") or {}
    namespace, name = meta.get("namespace"), meta.get("name")
    return f"{obj.kind} {namespace}/{name}" if namespace else f"{obj.kind} {name}"


def _advice(obj: Loaded, key: ObjectKey) -> str:
    group, kind, _, _ = key
    said = f"{label(obj)} ({obj.api_version})"
    if (group, kind) in UPSTREAM_GANGS:
        return f"{said}: no pod joins it: it waits for pods naming it in spec.schedulingGroup.podGroupName"
    versions = synthesized_versions(obj.api_version, kind)
    if versions:
        return (
            f"{said}: not simulated: topogang makes the pods of {kind} {' or '.join(versions)},"
            f" not {obj.api_version}; give it as {versions[0]}, or give its pods"
        )
    instead = INSTEAD.get((group, kind))
    if instead is not None:
        return f"{said}: not simulated: topogang does not make its pods; {instead}"
    return (
        f"{said}: not simulated: topogang reads no {kind}; if it makes pods, give them in the input (their"
        " ownerReferences naming it, as its controller sets them), or pods that name a PodGroup"
    )
