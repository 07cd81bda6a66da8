"""batch/v1 Job: one SubGroup `job`, minimum = parallelism capped by completions.

Indexed Jobs give their pods `batch.kubernetes.io/job-completion-index`, the index segments use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from extender.grouping import names as n
from extender.grouping.draft import Part
from extender.grouping.kinds.common import gang, spec, template
from extender.grouping.values import count
from extender.grouping.workload import Claim, Link, WorkloadDraft, single
from extender.model.errors import FieldError
from extender.model.pod import PodInfo

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
    part = Part(
        PART,
        replicas,
        replicas,
        annotations,
        where,
        index_label=n.JOB_COMPLETION_INDEX if indexed else None,
    )
    key = link.key()

    def classify(pod: PodInfo, below: Sequence[Link]) -> Claim:
        return Claim(key, PART)

    return single(gang(link, [part], errors), classify)
