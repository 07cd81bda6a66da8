"""Kubeflow's TFJob, PyTorchJob, JAXJob, XGBoostJob (v1) and MPIJob (v2beta1).

One SubGroup per replica type, named in lower case as the operator labels the pods
(`training.kubeflow.org/replica-type`), minimum = replicas, except:
  - PyTorchJob `spec.elasticPolicy.minReplicas` is the Worker minimum;
  - `spec.runPolicy.schedulingPolicy.minAvailable` (pods of the whole job) keeps every other
    replica type whole and leaves the rest to Worker (or, without one, to the last type).
MPIJob with `runLauncherAsWorker` numbers its workers from 1, so their index is shifted back.

Synthesized: TFJob ... -> Pod `<job>-<replica type>-<i>`; an MPIJob's launcher is a Job
`<job>-launcher` (-> Pod `<job>-launcher-0`), its workers Pods `<job>-worker-<i>`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from extender.grouping.grouper import Claim, Grouper, Link, Part, WorkloadDraft, single
from extender.grouping.kinds.common import gang, spec, template
from extender.grouping.kinds.job import BATCH_V1, job_pods
from extender.grouping.kinds.kind import Synthesizer, WorkloadKind, owner
from extender.grouping.synthesis import Synthesis
from extender.grouping.values import count, label_field, mapping_at
from extender.model.errors import FieldError
from extender.model.pod import PodInfo

JOB_NAME = "training.kubeflow.org/job-name"
OPERATOR_NAME = "training.kubeflow.org/operator-name"
REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
JOB_ROLE = "training.kubeflow.org/job-role"
MASTER_ROLES = frozenset({"chief", "master"})


def kubeflow_grouper(field: str) -> Grouper:
    def group(link: Link) -> WorkloadDraft:
        return _group(link, field)

    return group


def _group(link: Link, field: str) -> WorkloadDraft:
    obj = link.label
    errors: list[FieldError] = []
    body = spec(link, errors)
    specs = mapping_at(body, field, obj, "spec", errors)
    if not specs and f"spec.{field}" not in {e.field for e in errors}:
        errors.append(FieldError(obj, f"spec.{field}", "expected at least one replica type"))
    launcher_as_worker = link.ref.kind == "MPIJob" and body.get("runLauncherAsWorker") is True
    parts: list[Part] = []
    for rtype in specs:
        where = f"spec.{field}.{rtype}"
        rs = mapping_at(specs, str(rtype), obj, f"spec.{field}", errors)
        replicas = count(rs, "replicas", 1, obj, where, errors)
        _, annotations, template_where = template(rs, "template", obj, where, errors)
        name = str(rtype).lower()
        offset = 1 if launcher_as_worker and name == "worker" else 0
        parts.append(Part(name, replicas, replicas, annotations, template_where, None, REPLICA_INDEX, offset))
    parts = _minimums(link, body, parts, errors)
    key = link.key()
    names = {p.name for p in parts}

    def classify(pod: PodInfo, below: Sequence[Link]) -> Claim:
        value = pod.labels.get(REPLICA_TYPE)
        if value is None or value.lower() not in names:
            have = ", ".join(sorted(names))
            got = "missing" if value is None else f"{value!r} names no replica type of {obj} (have: {have})"
            return Claim(key, None, FieldError(f"Pod {pod.key}", label_field(REPLICA_TYPE), got))
        return Claim(key, value.lower())

    return single(gang(link, parts, errors), classify)


def _minimums(link: Link, spec_body: Mapping[str, Any], parts: list[Part], errors: list[FieldError]) -> list[Part]:
    obj = link.label
    worker = next((i for i, p in enumerate(parts) if p.name == "worker"), len(parts) - 1)
    if link.ref.kind == "PyTorchJob" and parts:
        elastic = mapping_at(spec_body, "elasticPolicy", obj, "spec", errors)
        if elastic.get("minReplicas") is not None and parts[worker].name == "worker":
            minimum = count(elastic, "minReplicas", parts[worker].replicas, obj, "spec.elasticPolicy", errors)
            parts[worker] = replace(parts[worker], minimum=min(minimum, parts[worker].replicas))
    run_policy = mapping_at(spec_body, "runPolicy", obj, "spec", errors)
    scheduling = mapping_at(run_policy, "schedulingPolicy", obj, "spec.runPolicy", errors)
    if scheduling.get("minAvailable") is None or not parts:
        return parts
    where = "spec.runPolicy.schedulingPolicy"
    min_available = count(scheduling, "minAvailable", 0, obj, where, errors)
    total = sum(p.replicas for p in parts)
    others = sum(p.minimum for i, p in enumerate(parts) if i != worker)
    if min_available > total:
        errors.append(FieldError(obj, f"{where}.minAvailable", f"is {min_available} but the job has {total} replicas"))
    elif min_available < others:
        msg = f"is {min_available} but the replica types other than {parts[worker].name} need {others} pods"
        errors.append(FieldError(obj, f"{where}.minAvailable", msg))
    else:
        parts[worker] = replace(parts[worker], minimum=min(min_available - others, parts[worker].replicas))
    return parts


def kubeflow_synthesizer(field: str, operator: str) -> Synthesizer:
    def make(out: Synthesis) -> None:
        _synthesize(out, field, operator)

    return make


def _synthesize(out: Synthesis, field: str, operator: str) -> None:
    specs = mapping_at(out.spec, field, out.obj, "spec", out.errors)
    launcher_as_worker = out.kind == "MPIJob" and out.spec.get("runLauncherAsWorker") is True
    for rtype in specs:
        where = f"spec.{field}.{rtype}"
        rs = mapping_at(specs, str(rtype), out.obj, f"spec.{field}", out.errors)
        replicas = count(rs, "replicas", 1, out.obj, where, out.errors)
        template_body = mapping_at(rs, "template", out.obj, where, out.errors)
        lower = str(rtype).lower()
        base = {JOB_NAME: out.name, OPERATOR_NAME: operator, REPLICA_TYPE: lower}
        if out.kind == "MPIJob" and lower == "launcher":
            labels = {**base, REPLICA_INDEX: "0", JOB_ROLE: "launcher"}
            launcher = f"{out.name}-launcher"
            job_ref = out.owner(BATCH_V1, "Job", launcher, out.ref(), labels, {"template": template_body})
            job_spec = {"parallelism": replicas, "completions": replicas, "template": template_body}
            job_pods(out, launcher, job_ref, job_spec, where, labels)
            continue
        out.expect(replicas, f"{where}.replicas")
        for i in range(replicas):
            index = i + 1 if launcher_as_worker and lower == "worker" else i
            labels = {**base, REPLICA_INDEX: str(index)}
            if lower in MASTER_ROLES and i == 0:
                labels[JOB_ROLE] = "master"
            out.pod(f"{out.name}-{lower}-{i}", template_body, out.ref(), labels)


# One row per kind of the family: (version, kind, plural, the spec field of its replica specs,
# the operator that labels its pods).
_FAMILY = (
    ("v1", "TFJob", "tfjobs", "tfReplicaSpecs", "tfjob-controller"),
    ("v1", "PyTorchJob", "pytorchjobs", "pytorchReplicaSpecs", "pytorchjob-controller"),
    ("v1", "JAXJob", "jaxjobs", "jaxReplicaSpecs", "jaxjob-controller"),
    ("v1", "XGBoostJob", "xgboostjobs", "xgbReplicaSpecs", "xgboostjob-controller"),
    ("v2beta1", "MPIJob", "mpijobs", "mpiReplicaSpecs", "mpi-operator"),
)

KINDS = tuple(
    WorkloadKind(
        owner("kubeflow.org", version, kind, plural),
        kubeflow_grouper(field),
        kubeflow_synthesizer(field, operator),
        REPLICA_INDEX,
    )
    for version, kind, plural, field, operator in _FAMILY
)
