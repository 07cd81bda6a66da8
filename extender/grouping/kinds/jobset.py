"""JobSet: one PodGroup; one SubGroup per replicated Job, with one SubGroup per Job index below.

    PodGroup <ns>/jobset-<name>
    └── <replicatedJob>            the pod template's placement (KAI or Kueue podset-*): all its Jobs
        ├── <replicatedJob>-0      one Job: minMember = parallelism capped by completions;
        └── <replicatedJob>-1      segments / slices of the Job's completion indexes below it

`alpha.jobset.sigs.k8s.io/exclusive-topology` (on the JobSet or on a replicated Job's template)
makes each Job's SubGroup required and exclusive at that level. Kueue's podset-slice-size
defaults to the Job's parallelism, as in Kueue.
"""

from __future__ import annotations

from collections.abc import Sequence

from extender.grouping import names as n
from extender.grouping.draft import Part
from extender.grouping.kinds.common import gang, spec, template
from extender.grouping.kinds.job import job_replicas
from extender.grouping.values import ann_field, annotations_of, count, label_field, level, list_at, mapping_at
from extender.grouping.workload import Claim, Link, WorkloadDraft, single
from extender.model.errors import FieldError
from extender.model.pod import PodInfo
from extender.model.podgroup import SubGroupSpec, TopologyConstraint
from extender.model.raw import literal


def group_jobset(link: Link) -> WorkloadDraft:
    obj = link.label
    errors: list[FieldError] = []
    s = spec(link, errors)
    draft = gang(link, [], errors)
    js_exclusive = level(draft.annotations.get(n.JS_EXCLUSIVE), obj, ann_field("", n.JS_EXCLUSIVE), errors)
    copies: dict[str, int] = {}
    for i, raw in enumerate(list_at(s, "replicatedJobs", obj, "spec", errors)):
        where = f"spec.replicatedJobs[{i}]"
        rjob = raw if isinstance(raw, dict) else {}
        name = rjob.get("name")
        if not isinstance(name, str) or not name:
            errors.append(FieldError(obj, f"{where}.name", f"expected a non-empty name, got {literal(name)}"))
            continue
        replicas = count(rjob, "replicas", 1, obj, where, errors)
        job_template = mapping_at(rjob, "template", obj, where, errors)
        job_spec = mapping_at(job_template, "spec", obj, f"{where}.template", errors)
        per_job = job_replicas(job_spec, obj, f"{where}.template.spec", errors)
        _, annotations, pod_where = template(job_spec, "template", obj, f"{where}.template.spec", errors)
        indexed = job_spec.get("completionMode") == "Indexed"
        job_ann = annotations_of(job_template)
        exclusive_field = ann_field(f"{where}.template", n.JS_EXCLUSIVE)
        exclusive = level(job_ann.get(n.JS_EXCLUSIVE), obj, exclusive_field, errors)
        if exclusive is None and js_exclusive is not None:
            exclusive, exclusive_field = js_exclusive, ann_field("", n.JS_EXCLUSIVE)
        draft.parents.append(SubGroupSpec(name, None, min_subgroup=replicas))
        copies[name] = replicas
        for j in range(replicas):
            part = Part(
                f"{name}-{j}",
                per_job,
                per_job,
                annotations,
                pod_where,
                index_label=n.JOB_COMPLETION_INDEX if indexed else None,
                parent=name,
                target=name,
                slice_default=per_job,
            )
            draft.parts.append(part)
            if exclusive is not None:
                c = TopologyConstraint(required=exclusive, field=exclusive_field, exclusive=True)
                draft.constraints[part.name] = c
    key = draft.key

    def classify(pod: PodInfo, below: Sequence[Link]) -> Claim:
        rjob = pod.labels.get(n.JS_REPLICATED_JOB)
        if rjob is None or rjob not in copies:
            have = ", ".join(copies)
            why = "missing" if rjob is None else f"{rjob!r} names no replicated Job of {obj} (have: {have})"
            return Claim(key, None, FieldError(f"Pod {pod.key}", label_field(n.JS_REPLICATED_JOB), why))
        raw = pod.labels.get(n.JS_JOB_INDEX)
        if raw is None or not raw.isdigit() or int(raw) >= copies[rjob]:
            why = "missing" if raw is None else f"{raw!r} is not a Job index of {rjob} (0..{copies[rjob] - 1})"
            return Claim(key, None, FieldError(f"Pod {pod.key}", label_field(n.JS_JOB_INDEX), why))
        return Claim(key, f"{rjob}-{int(raw)}")

    return single(draft, classify)
