"""A job as topogang sees it: a PodGroup and its pods, built into a Gang by the engine's build_gang.

A job with segments is the shape the groupers make from a segment annotation: a SubGroup
`worker` holding one SubGroup per segment (`worker-<k>`, required in a rack), the PodGroup's
global constraint for the job's level. A job without segments is a PodGroup of plain pods. An
elastic job's minimum is `minMember` (`minSubGroup`: its first segments) below its pods, the rest
optional; pods already running are given their node (the engine places the others around them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.tracesim.cluster import GPU, LABELS, LEVELS, TOPOLOGY_NAME, Cluster
from bench.tracesim.workload import Job
from extender.model.pod import parse_pod
from extender.model.podgroup import parse_podgroup
from extender.placement import Gang, build_gang

NAMESPACE = "trace"


def label(level: str) -> str:
    return LABELS[LEVELS.index(level)]


def pod_name(job: Job, i: int) -> str:
    return f"j{job.id}-{i}"


def podgroup_body(job: Job) -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": job.min_pods}
    constraints: dict[str, Any] = {}
    if job.job_level:
        constraints["global"] = {"requiredTopologyLevel": label(job.job_level), "topology": TOPOLOGY_NAME}
    if job.segment:
        n = job.segments
        spec = {
            "subGroups": [
                {"name": "worker", "minSubGroup": job.min_pods // job.segment},
                *({"name": f"worker-{k}", "parent": "worker", "minMember": job.segment} for k in range(n)),
            ]
        }
        req = {"requiredTopologyLevel": label(job.segment_level), "topology": TOPOLOGY_NAME}
        constraints["subGroups"] = {f"worker-{k}": dict(req) for k in range(n)}
    if constraints:
        spec["topologyConstraints"] = constraints
    return {"metadata": {"name": f"j{job.id}", "namespace": NAMESPACE}, "spec": spec}


def pod_body(job: Job, i: int, node: str | None = None) -> dict[str, Any]:
    labels = {"kai.scheduler/subgroup-name": f"worker-{i // job.segment}"} if job.segment else {}
    gpus = str(job.gpus)
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": {GPU: gpus}, "limits": {GPU: gpus}}}]
    }
    if node is not None:
        spec["nodeName"] = node
    return {"metadata": {"name": pod_name(job, i), "namespace": NAMESPACE, "labels": labels}, "spec": spec}


def gang(job: Job, cluster: Cluster, running: Mapping[int, str] | None = None) -> Gang:
    """JOB's gang; RUNNING: pod index -> node of its pods already placed."""
    placed = running or {}
    built = build_gang(
        parse_podgroup(podgroup_body(job)),
        [parse_pod(pod_body(job, i, placed.get(i))) for i in range(job.pods)],
        {TOPOLOGY_NAME: cluster.topology},
    )
    if built.gang is None:
        raise ValueError(f"job {job.id}: {'; '.join(str(e) for e in built.errors)}")
    return built.gang
