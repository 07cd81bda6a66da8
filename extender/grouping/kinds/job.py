"""batch/v1 Job: one SubGroup `job`, minimum = parallelism capped by completions, or what its
`spec.scheduling` (Kubernetes' WorkloadWithJob) says: gang.minCount, basic (one pod), topology keys.

Indexed Jobs give their pods `batch.kubernetes.io/job-completion-index`, the index segments use.
Synthesized: Job -> Pod `<job>-<i>`, parallelism of them (capped by completions).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from extender.grouping.grouper import Claim, Link, Part, WorkloadDraft, single
from extender.grouping.kinds.common import gang, spec, template
from extender.grouping.kinds.kind import WorkloadKind, owner
from extender.grouping.synthesis import JSON, Synthesis
from extender.grouping.upstream.objects import job_scheduling
from extender.grouping.values import count, mapping_at
from extender.model.errors import ErrorList, FieldError
from extender.model.pod import PodInfo
from extender.model.podgroup import TopologyConstraint

BATCH_V1 = "batch/v1"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
NAME = "batch.kubernetes.io/job-name"
NAME_LEGACY = "job-name"
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
CONTROLLER_UID_LEGACY = "controller-uid"

PART = "job"


def job_replicas(body: Mapping[str, Any], obj: str, where: str, errors: list[FieldError]) -> int:
    """How many pods of a Job run at once: parallelism (default 1), capped by completions."""
    parallelism = count(body, "parallelism", 1, obj, where, errors)
    if body.get("completions") is None:
        return parallelism
    return min(parallelism, count(body, "completions", parallelism, obj, where, errors))


def group_job(link: Link) -> WorkloadDraft:
    errors: list[FieldError] = []
    body = spec(link, errors)
    replicas = job_replicas(body, link.label, "spec", errors)
    _, annotations, where = template(body, "template", link.label, "spec", errors)
    indexed = body.get("completionMode") == "Indexed"
    minimum, constraint = _scheduling(body, replicas, link.label, errors)
    part = Part(
        PART,
        replicas,
        minimum,
        annotations,
        where,
        index_label=COMPLETION_INDEX if indexed else None,
    )
    key = link.key()

    def classify(pod: PodInfo, below: Sequence[Link]) -> Claim:
        return Claim(key, PART)

    draft = gang(link, [part], errors)
    if constraint is not None:
        draft.constraints[PART] = constraint
    return single(draft, classify)


def _scheduling(
    body: Mapping[str, Any], replicas: int, obj: str, errors: list[FieldError]
) -> tuple[int, TopologyConstraint | None]:
    """The Job's minimum and constraint from `spec.scheduling` (Kubernetes' WorkloadWithJob):
    gang.minCount (default: the pods it runs at once), basic: one pod; unset: every pod."""
    if body.get("scheduling") is None:
        return replicas, None
    found = ErrorList(obj)
    gang_, count, constraint = job_scheduling(body["scheduling"], found)
    errors.extend(found.errors)
    if gang_ is False:
        return 1, constraint
    if count is not None and count > replicas:
        at = "spec.scheduling.schedulingPolicy.gang.minCount"
        errors.append(FieldError(obj, at, f"is {count} but the Job runs {replicas} pod(s) at once (parallelism)"))
        return replicas, constraint
    return (count if count is not None else replicas), constraint


def job_pods(
    out: Synthesis,
    job_name: str,
    job_ref: JSON,
    job_spec: Mapping[str, Any],
    where: str,
    extra: Mapping[str, str],
    extra_annotations: Mapping[str, str] | None = None,
) -> None:
    """The pods of one batch/v1 Job: parallelism of them (capped by completions), indexed or not."""
    replicas = job_replicas(job_spec, out.obj, where, out.errors)
    template_body = mapping_at(job_spec, "template", out.obj, where, out.errors)
    indexed = job_spec.get("completionMode") == "Indexed"
    out.expect(replicas, f"{where}.parallelism")
    uid = str(job_ref["uid"])
    for i in range(replicas):
        labels = {
            CONTROLLER_UID: uid,
            CONTROLLER_UID_LEGACY: uid,
            NAME: job_name,
            NAME_LEGACY: job_name,
            **extra,
        }
        annotations = dict(extra_annotations or {})
        if indexed:
            labels[COMPLETION_INDEX] = str(i)
            annotations[COMPLETION_INDEX] = str(i)
        out.pod(f"{job_name}-{i}", template_body, job_ref, labels, annotations)


def synthesize_job(out: Synthesis) -> None:
    job_pods(out, out.name, out.ref(), out.spec, "spec", {})


KINDS = (WorkloadKind(owner("batch", "v1", "Job", "jobs"), group_job, synthesize_job, COMPLETION_INDEX),)
