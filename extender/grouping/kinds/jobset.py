"""JobSet: one PodGroup; one SubGroup per replicated Job, with one SubGroup per Job index below.

    PodGroup <ns>/jobset-<name>
    └── <replicatedJob>            the pod template's KAI placement: all its Jobs
        ├── <replicatedJob>-0      one Job: minMember = parallelism capped by completions; the
        │                          template's Kueue podset-* placement (each Job on its own, Kueue's TAS KEP);
        └── <replicatedJob>-1      segments / slices of the Job's completion indexes below it

`alpha.jobset.sigs.k8s.io/exclusive-topology` (on the JobSet or on a replicated Job's template)
makes each Job's SubGroup required and exclusive at that level. JobSet's pod webhook then admits
a Job's followers (completion index > 0) only once its leader (index 0) is scheduled, and gives
each follower a nodeSelector to its leader's domain: such a Job is a leader-first part
(`Part.leader_first`; core/membership.py counts its followers before they exist). With JobSet's
node-selector strategy (`alpha.jobset.sigs.k8s.io/node-selector`, nodes labelled per Job
beforehand) the webhook admits every pod at once. Kueue's podset-slice-size defaults to the Job's
parallelism, as in Kueue.

Synthesized: JobSet -> Job `<js>-<rjob>-<j>` -> Pod `<js>-<rjob>-<j>-<i>`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from extender.grouping.grouper import Claim, Classifier, GangDraft, Link, Part, WorkloadDraft, single
from extender.grouping.kinds.common import body, gang, spec, template
from extender.grouping.kinds.job import BATCH_V1, COMPLETION_INDEX, job_pods, job_replicas
from extender.grouping.kinds.kind import WorkloadKind, owner
from extender.grouping.synthesis import JSON, Synthesis, uid_for
from extender.grouping.values import (
    ann_field,
    annotation_keys,
    annotations_of,
    count,
    label_field,
    level,
    list_at,
    mapping_at,
)
from extender.model import annotation_keys as keys
from extender.model.errors import FieldError
from extender.model.pod import PodInfo
from extender.model.podgroup import SubGroupSpec, TopologyConstraint
from extender.model.raw import literal

NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
REPLICATED_JOB_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOB_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
JOB_KEY = "jobset.sigs.k8s.io/job-key"
EXCLUSIVE = keys.JOBSET_EXCLUSIVE
NODE_SELECTOR = keys.JOBSET_NODE_SELECTOR


def group_jobset(link: Link) -> WorkloadDraft:
    draft = gang(link, [], [])
    return single(draft, read_jobset(link, draft))


def read_jobset(js: Link, draft: GangDraft) -> Classifier:
    """Reads JobSet JS's replicated Jobs into DRAFT (its parts, the SubGroups above them, their
    constraints; errors in draft.errors) and returns how its pods join them. DRAFT is the
    JobSet's own gang, or the gang of the workload that made the JobSet (a TrainJob): its
    templates are then fields of the JobSet, named as such."""
    obj = js.label
    errors = draft.errors
    s = spec(js, errors)
    annotations = annotations_of(body(js))
    js_exclusive = level(annotations.get(EXCLUSIVE), obj, ann_field("", EXCLUSIVE), errors)
    template_obj = obj if obj != draft.obj else None
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
        _, pod_annotations, pod_where = template(job_spec, "template", obj, f"{where}.template.spec", errors)
        indexed = job_spec.get("completionMode") == "Indexed"
        job_ann = annotations_of(job_template)
        annotation_keys(job_ann, obj, f"{where}.template", errors, draft.warnings)
        exclusive_field = ann_field(f"{where}.template", EXCLUSIVE)
        exclusive = level(job_ann.get(EXCLUSIVE), obj, exclusive_field, errors)
        # JobSet copies the strategy annotation from where it copies the exclusive one.
        by_node_selector = NODE_SELECTOR in job_ann if EXCLUSIVE in job_ann else NODE_SELECTOR in draft.annotations
        if exclusive is None and js_exclusive is not None:
            exclusive, exclusive_field = js_exclusive, ann_field("", EXCLUSIVE)
        draft.parents.append(SubGroupSpec(name, None, min_subgroup=replicas))
        copies[name] = replicas
        for j in range(replicas):
            part = Part(
                f"{name}-{j}",
                per_job,
                per_job,
                pod_annotations,
                pod_where,
                template_obj=template_obj,
                index_label=COMPLETION_INDEX if indexed else None,
                parent=name,
                target=name,
                slice_default=per_job,
                kueue_own=True,
                leader_first=exclusive is not None and indexed and not by_node_selector,
            )
            draft.parts.append(part)
            if exclusive is not None:
                c = TopologyConstraint(
                    required=exclusive,
                    field=exclusive_field,
                    exclusive=True,
                    required_fields=(exclusive_field,),
                    obj=obj,
                )
                draft.constraints[part.name] = c
    key = draft.key

    def classify(pod: PodInfo, below: Sequence[Link]) -> Claim:
        rjob = pod.labels.get(REPLICATED_JOB)
        if rjob is None or rjob not in copies:
            have = ", ".join(copies)
            why = "missing" if rjob is None else f"{rjob!r} names no replicated Job of {obj} (have: {have})"
            return Claim(key, None, FieldError(f"Pod {pod.key}", label_field(REPLICATED_JOB), why))
        raw = pod.labels.get(JOB_INDEX)
        if raw is None or not raw.isdigit() or int(raw) >= copies[rjob]:
            why = "missing" if raw is None else f"{raw!r} is not a Job index of {rjob} (0..{copies[rjob] - 1})"
            return Claim(key, None, FieldError(f"Pod {pod.key}", label_field(JOB_INDEX), why))
        return Claim(key, f"{rjob}-{int(raw)}")

    return classify


def synthesize_jobset(out: Synthesis) -> None:
    jobset_pods(out, out.name, out.spec, out.ref(), out.obj, "spec")


def jobset_pods(out: Synthesis, name: str, js_spec: Mapping[str, Any], js_ref: JSON, obj: str, where: str) -> None:
    """The Jobs and pods JobSet NAME (spec JS_SPEC at field WHERE of OBJ) makes, owned by JS_REF."""
    rjobs = list_at(js_spec, "replicatedJobs", obj, where, out.errors)
    replicas_of = [
        count(r, "replicas", 1, obj, f"{where}.replicatedJobs[{i}]", out.errors) if isinstance(r, Mapping) else 0
        for i, r in enumerate(rjobs)
    ]
    global_index = 0
    for i, at, rjob, rname in out.named(rjobs, "name", f"{where}.replicatedJobs", obj):
        job_template = mapping_at(rjob, "template", obj, at, out.errors)
        job_spec = mapping_at(job_template, "spec", obj, f"{at}.template", out.errors)
        for j in range(replicas_of[i]):
            job_name = f"{name}-{rname}-{j}"
            labels = {
                NAME: name,
                REPLICATED_JOB: rname,
                REPLICATED_JOB_REPLICAS: str(replicas_of[i]),
                JOB_INDEX: str(j),
                JOB_GLOBAL_INDEX: str(global_index),
                JOB_KEY: uid_for("job-key", out.namespace, job_name),
            }
            global_index += 1
            job_ref = out.owner(BATCH_V1, "Job", job_name, js_ref, labels, job_spec)
            job_pods(out, job_name, job_ref, job_spec, f"{at}.template.spec", labels, labels)


KINDS = (WorkloadKind(owner("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"), group_jobset, synthesize_jobset),)
