"""Kubeflow's TFJob, PyTorchJob, JAXJob, XGBoostJob (v1) and MPIJob (v2beta1).

One SubGroup per replica type, named in lower case as the operator labels the pods
(`training.kubeflow.org/replica-type`), minimum = replicas, except:
  - PyTorchJob `spec.elasticPolicy.minReplicas` is the Worker minimum;
  - `spec.runPolicy.schedulingPolicy.minAvailable` (pods of the whole job) keeps every other
    replica type whole and leaves the rest to Worker (or, without one, to the last type).
MPIJob with `runLauncherAsWorker` numbers its workers from 1, so their index is shifted back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from extender.grouping import names as n
from extender.grouping.draft import Part
from extender.grouping.kinds.common import gang, spec, template
from extender.grouping.values import count, label_field, mapping_at
from extender.grouping.workload import Claim, Grouper, Link, WorkloadDraft, single
from extender.model.errors import FieldError
from extender.model.pod import PodInfo


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
        parts.append(Part(name, replicas, replicas, annotations, template_where, None, n.KF_REPLICA_INDEX, offset))
    parts = _minimums(link, body, parts, errors)
    key = link.key()
    names = {p.name for p in parts}

    def classify(pod: PodInfo, below: Sequence[Link]) -> Claim:
        value = pod.labels.get(n.KF_REPLICA_TYPE)
        if value is None or value.lower() not in names:
            have = ", ".join(sorted(names))
            got = "missing" if value is None else f"{value!r} names no replica type of {obj} (have: {have})"
            return Claim(key, None, FieldError(f"Pod {pod.key}", label_field(n.KF_REPLICA_TYPE), got))
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
