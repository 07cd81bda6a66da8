"""The workload kinds topogang groups, each declared once in its own module (grouper, pod
synthesizer, index label, owner Resource and label names together). Adding a kind means a
module with a `KINDS` tuple and one entry below; every table is derived from `KINDS`.

`apps` is apart: Deployments, ReplicaSets and StatefulSets have a pod synthesizer (for the
simulator) and no grouper, so they add to SYNTHESIZERS only.
"""

from __future__ import annotations

from extender.grouping.grouper import Grouper
from extender.grouping.kinds import apps, grove, job, jobset, kubeflow, lws, ray, trainjob
from extender.grouping.kinds.kind import Reads, Synthesizer, WorkloadKind, no_reads, owner
from extender.model.resource import Resource

KINDS: tuple[WorkloadKind, ...] = (
    *job.KINDS,
    *kubeflow.KINDS,
    *lws.KINDS,
    *jobset.KINDS,
    *trainjob.KINDS,
    *ray.KINDS,
    *grove.KINDS,
)

BY_GVK: dict[tuple[str, str], WorkloadKind] = {k.gvk: k for k in KINDS}

# The built-in groupers and synthesizers, by the (apiVersion, kind) of the owner they read.
BUILTIN: dict[tuple[str, str], Grouper] = {gvk: k.group for gvk, k in BY_GVK.items()}
# apps/v1 Deployments, ReplicaSets and StatefulSets have pods made for them but no grouper: their
# pods are grouped by the rule for owners no grouper knows (group.py).
SYNTHESIZERS: dict[tuple[str, str], Synthesizer] = {
    **{gvk: k.synthesize for gvk, k in BY_GVK.items()},
    **apps.SYNTHESIZERS,
}
# The objects besides owners each grouper reads for a pod (only kinds that read some).
SIDE_READS: dict[tuple[str, str], Reads] = {gvk: k.reads for gvk, k in BY_GVK.items() if k.reads is not no_reads}

# The index label of each kind, as KAI's segment design's table lists it (Jobs: when Indexed).
DEFAULT_INDEX_LABELS: dict[tuple[str, str], str] = {
    gvk: k.index_label for gvk, k in BY_GVK.items() if k.index_label is not None
}

# Owners no grouper reads: pods reach their workload through them (a LeaderWorkerSet's
# StatefulSets, a Deployment's ReplicaSets), and at the top of a chain their annotations say
# whether their pods are a gang and spec.replicas how many it needs (`grouping/fallback.py`).
APPS_OWNERS = (
    owner("apps", "v1", "Deployment", "deployments"),
    owner("apps", "v1", "StatefulSet", "statefulsets"),
    owner("apps", "v1", "ReplicaSet", "replicasets"),
)

# Every owner the pod grouper reads on its walk from a pod up to its workload, and the other
# objects a kind's grouper reads (Grove's PodGangs).
OWNER_RESOURCES: tuple[Resource, ...] = (
    *(k.resource for k in KINDS),
    *APPS_OWNERS,
    *(r for k in KINDS for r in k.watch),
)

__all__ = [
    "APPS_OWNERS",
    "BUILTIN",
    "BY_GVK",
    "DEFAULT_INDEX_LABELS",
    "KINDS",
    "OWNER_RESOURCES",
    "SIDE_READS",
    "SYNTHESIZERS",
    "Synthesizer",
    "WorkloadKind",
]
