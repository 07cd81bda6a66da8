"""The built-in groupers, by the (apiVersion, kind) of the owner they read."""

from __future__ import annotations

from extender.grouping import names as n
from extender.grouping.kinds.job import group_job
from extender.grouping.kinds.jobset import group_jobset
from extender.grouping.kinds.kubeflow import kubeflow_grouper
from extender.grouping.kinds.lws import group_lws
from extender.grouping.kinds.ray import group_raycluster, group_rayjob
from extender.grouping.workload import Grouper

BUILTIN: dict[tuple[str, str], Grouper] = {
    (n.BATCH_V1, "Job"): group_job,
    **{gvk: kubeflow_grouper(field) for gvk, field in n.KUBEFLOW_REPLICA_SPECS.items()},
    (n.LWS_V1, "LeaderWorkerSet"): group_lws,
    (n.JOBSET_V1ALPHA2, "JobSet"): group_jobset,
    (n.RAY_V1, "RayCluster"): group_raycluster,
    (n.RAY_V1, "RayJob"): group_rayjob,
}

# The index label of each kind, as seed 000's table lists it (Jobs: when Indexed).
DEFAULT_INDEX_LABELS: dict[tuple[str, str], str] = {
    (n.BATCH_V1, "Job"): n.JOB_COMPLETION_INDEX,
    **dict.fromkeys(n.KUBEFLOW_REPLICA_SPECS, n.KF_REPLICA_INDEX),
    (n.LWS_V1, "LeaderWorkerSet"): n.LWS_WORKER_INDEX,
}

__all__ = ["BUILTIN", "DEFAULT_INDEX_LABELS"]
