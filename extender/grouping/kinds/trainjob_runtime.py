"""What Kubeflow Trainer makes of a TrainJob and its runtime: the JobSet, for the simulator.

The rules of Trainer v2.3.0 (`pkg/runtime/core/trainingruntime.go`, the JobSet, Torch, MPI and
PlainML plugins), as far as they move pods:

    JobSet <trainjob>      labels, annotations: the runtime's spec.template.metadata, then each
                           spec.runtimePatches[].trainingRuntimeSpec.template.metadata over it
    spec                   the runtime's spec.template.spec with each runtime patch's
                           template.spec merged in (a strategic merge: replicated Jobs,
                           containers, volumes by name; maps key by key; other lists replaced)
    pods of a Job          parallelism (default 1); the trainer step's (its Job template
                           labelled trainer.kubeflow.org/trainjob-ancestor-step: trainer)
                           mlPolicy.numNodes (default 1), and spec.trainer.numNodes over that
                           (with mlPolicy.mpi: the Job named node, one less with
                           runLauncherAsNode); parallelism = completions = that count; the
                           trainer and initializer steps run one Job (replicas 1)
    completionMode         Indexed unless written (JobSet's webhook defaults it)
    container node         spec.trainer.resourcesPerNode over its resources, key by key (the
                           trainer step's when the runtime has an mlPolicy; with MPI's
                           runLauncherAsNode, the Job named node's too)
    pod label              scheduling.x-k8s.io/pod-group: <trainjob> with podGroupPolicy.coscheduling

Images, commands, environment and volumes are left as the runtime writes them: they move no pod.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.grouping.values import count, list_at, mapping_at
from extender.model.errors import ErrorList, FieldError
from extender.model.labels import POD_GROUP_LABEL
from extender.model.raw import literal, unknown_fields

JSON = dict[str, Any]
STEP = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_STEP = "trainer"
ONE_JOB_STEPS = frozenset({TRAINER_STEP, "dataset-initializer", "model-initializer"})
NODE = "node"  # the trainer's container, and MPI's Job of nodes

# The lists a strategic merge joins item by item, by this key (Kubernetes' patchMergeKey).
_MERGE_KEYS = {
    "replicatedJobs": "name",
    "dependsOn": "name",
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "schedulingGates": "name",
}
# What a runtime patch may say (Trainer's TrainingRuntimeSpecPatch and below); the API server
# drops anything else, so a typo there would change nothing without a word.
_PATCH = {"manager", "time", "trainingRuntimeSpec"}
_META = {"labels", "annotations"}
_POD_SPEC = {
    "serviceAccountName", "volumes", "initContainers", "containers", "imagePullSecrets", "securityContext",
    "nodeSelector", "affinity", "tolerations", "schedulingGates", "terminationGracePeriodSeconds",
}  # fmt: skip


@dataclass(frozen=True)
class MadeJobSet:
    labels: dict[str, str]
    annotations: dict[str, str]
    spec: JSON


def strategic_merge(base: Any, patch: Any, key: str = "") -> Any:
    """PATCH over BASE as a strategic merge patch does for the fields Trainer lets a patch set."""
    if isinstance(base, Mapping) and isinstance(patch, Mapping):
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = strategic_merge(base.get(k), v, str(k))
        return out
    merge_key = _MERGE_KEYS.get(key)
    if merge_key is not None and isinstance(base, list) and isinstance(patch, list):
        out_list = list(base)
        at = {item.get(merge_key): i for i, item in enumerate(out_list) if isinstance(item, Mapping)}
        for item in patch:
            name = item.get(merge_key) if isinstance(item, Mapping) else None
            if name is not None and name in at:
                out_list[at[name]] = strategic_merge(out_list[at[name]], item)
            else:
                out_list.append(copy.deepcopy(item))
        return out_list
    return copy.deepcopy(patch)


def made_jobset(
    name: str, spec: Mapping[str, Any], runtime: Mapping[str, Any], runtime_obj: str, obj: str, errors: list[FieldError]
) -> MadeJobSet:
    """The JobSet Trainer makes for TrainJob NAME (SPEC, fields of OBJ) from RUNTIME (RUNTIME_OBJ)."""
    rspec = mapping_at(runtime, "spec", runtime_obj, "", errors)
    tmpl = mapping_at(rspec, "template", runtime_obj, "spec", errors)
    meta = mapping_at(tmpl, "metadata", runtime_obj, "spec.template", errors)
    labels, annotations = _strings(meta.get("labels")), _strings(meta.get("annotations"))
    js_spec: JSON = copy.deepcopy(dict(mapping_at(tmpl, "spec", runtime_obj, "spec.template", errors)))
    names = []
    for i, rjob in enumerate(list_at(js_spec, "replicatedJobs", runtime_obj, "spec.template.spec", errors)):
        if not isinstance(rjob, Mapping):
            at = f"spec.template.spec.replicatedJobs[{i}]"
            errors.append(FieldError(runtime_obj, at, f"expected an object, got {literal(rjob)}"))
        else:
            names.append(rjob.get("name"))
    for i, patch in enumerate(list_at(spec, "runtimePatches", obj, "spec", errors)):
        where = f"spec.runtimePatches[{i}]"
        template_patch = _patch_template(patch, obj, where, names, errors)
        patch_meta = template_patch.get("metadata")
        if isinstance(patch_meta, Mapping):
            labels.update(_strings(patch_meta.get("labels")))
            annotations.update(_strings(patch_meta.get("annotations")))
        if isinstance(template_patch.get("spec"), Mapping):
            js_spec = strategic_merge(js_spec, template_patch["spec"])
    # A strategic merge may reorder the list; Trainer puts the runtime's order back.
    merged = js_spec.get("replicatedJobs")
    rjobs = [r for r in merged if isinstance(r, Mapping)] if isinstance(merged, list) else []
    rjobs.sort(key=lambda r: names.index(r["name"]) if r.get("name") in names else len(names))
    policy = _Policy.read(spec, rspec, runtime_obj, obj, errors)
    js_spec["replicatedJobs"] = [_job(r, i, policy, runtime_obj, errors) for i, r in enumerate(rjobs)]
    if isinstance(mapping_at(rspec, "podGroupPolicy", runtime_obj, "spec", errors).get("coscheduling"), Mapping):
        for rjob in js_spec["replicatedJobs"]:
            pod_meta = rjob["template"]["spec"]["template"].setdefault("metadata", {})
            pod_meta["labels"] = {**_strings(pod_meta.get("labels")), POD_GROUP_LABEL: name}
    return MadeJobSet(labels, annotations, js_spec)


def _patch_template(patch: Any, obj: str, where: str, names: list[Any], errors: list[FieldError]) -> Mapping[str, Any]:
    """A runtime patch's template (JobSetTemplatePatch), its fields checked."""
    if not isinstance(patch, Mapping):
        errors.append(FieldError(obj, where, f"expected an object, got {literal(patch)}"))
        return {}
    found = ErrorList(obj)
    unknown_fields(patch, _PATCH, where, found)
    runtime_spec = mapping_at(patch, "trainingRuntimeSpec", obj, where, errors)
    unknown_fields(runtime_spec, {"template"}, f"{where}.trainingRuntimeSpec", found)
    at = f"{where}.trainingRuntimeSpec.template"
    tmpl = mapping_at(runtime_spec, "template", obj, f"{where}.trainingRuntimeSpec", errors)
    js_spec = _check_template(tmpl, {"replicatedJobs"}, obj, at, found, errors)
    for j, raw in enumerate(list_at(js_spec, "replicatedJobs", obj, f"{at}.spec", errors)):
        rwhere = f"{at}.spec.replicatedJobs[{j}]"
        rjob = raw if isinstance(raw, Mapping) else {}
        if rjob.get("name") not in names:
            have = ", ".join(str(n) for n in names)
            found.add(
                f"{rwhere}.name", f"{literal(rjob.get('name'))} names no replicated Job of the runtime (have: {have})"
            )
        unknown_fields(rjob, {"name", "template"}, rwhere, found)
        job_tmpl = mapping_at(rjob, "template", obj, rwhere, errors)
        job_spec = _check_template(job_tmpl, {"template"}, obj, f"{rwhere}.template", found, errors)
        pod = mapping_at(job_spec, "template", obj, f"{rwhere}.template.spec", errors)
        _check_template(pod, _POD_SPEC, obj, f"{rwhere}.template.spec.template", found, errors)
    errors.extend(found.errors)
    return tmpl


def _check_template(
    tmpl: Mapping[str, Any], spec_fields: set[str], obj: str, where: str, found: ErrorList, errors: list[FieldError]
) -> Mapping[str, Any]:
    """A template patch's spec; its fields checked: metadata (labels and annotations only) and a
    spec of SPEC_FIELDS."""
    unknown_fields(tmpl, {"metadata", "spec"}, where, found)
    unknown_fields(mapping_at(tmpl, "metadata", obj, where, errors), _META, f"{where}.metadata", found)
    spec = mapping_at(tmpl, "spec", obj, where, errors)
    unknown_fields(spec, spec_fields, f"{where}.spec", found)
    return spec


@dataclass(frozen=True)
class _Policy:
    """What of the runtime's mlPolicy and the TrainJob's spec.trainer sets a Job's pods."""

    ml_policy: bool  # the runtime has an mlPolicy
    ml_nodes: int  # mlPolicy.numNodes (default 1)
    mpi: bool
    launcher_as_node: bool  # mlPolicy.mpi.runLauncherAsNode
    nodes: int | None  # the TrainJob's spec.trainer.numNodes
    per_node: Mapping[str, Any]  # the TrainJob's spec.trainer.resourcesPerNode

    @classmethod
    def read(
        cls, spec: Mapping[str, Any], rspec: Mapping[str, Any], runtime_obj: str, obj: str, errors: list[FieldError]
    ) -> _Policy:
        ml_policy = mapping_at(rspec, "mlPolicy", runtime_obj, "spec", errors)
        mpi = mapping_at(ml_policy, "mpi", runtime_obj, "spec.mlPolicy", errors)
        trainer = mapping_at(spec, "trainer", obj, "spec", errors)
        return cls(
            ml_policy=rspec.get("mlPolicy") is not None,
            ml_nodes=count(ml_policy, "numNodes", 1, runtime_obj, "spec.mlPolicy", errors),
            mpi=ml_policy.get("mpi") is not None,
            launcher_as_node=mpi.get("runLauncherAsNode") is True,
            nodes=count(trainer, "numNodes", 1, obj, "spec.trainer", errors)
            if trainer.get("numNodes") is not None
            else None,
            per_node=mapping_at(trainer, "resourcesPerNode", obj, "spec.trainer", errors),
        )

    def pods(self, name: Any, step: str | None, parallelism: int) -> int:
        """How many pods Trainer gives one Job of replicated Job NAME."""
        pods = self.ml_nodes if step == TRAINER_STEP and self.ml_policy else parallelism
        if self.nodes is None:
            return pods
        if self.mpi:  # MPI sets its Job of nodes; the launcher (the trainer step) keeps its count
            if name != NODE:
                return pods
            return max(self.nodes - 1, 1) if self.launcher_as_node else self.nodes
        return self.nodes if step == TRAINER_STEP else pods

    def sized(self, name: Any, step: str | None) -> bool:
        """Whether resourcesPerNode goes to the Job's node container."""
        return bool(self.per_node) and (
            (step == TRAINER_STEP and self.ml_policy) or (self.launcher_as_node and name == NODE)
        )


def _job(rjob: Mapping[str, Any], i: int, policy: _Policy, runtime_obj: str, errors: list[FieldError]) -> JSON:
    """Replicated Job I of the JobSet as Trainer sets it: its pods, its replicas, its resources."""
    out: JSON = copy.deepcopy(dict(rjob))
    where = f"spec.template.spec.replicatedJobs[{i}]"
    job_tmpl = out["template"] = dict(mapping_at(out, "template", runtime_obj, where, errors))
    step = _strings(mapping_at(job_tmpl, "metadata", runtime_obj, f"{where}.template", errors).get("labels")).get(STEP)
    job_spec = job_tmpl["spec"] = dict(mapping_at(job_tmpl, "spec", runtime_obj, f"{where}.template", errors))
    pod = job_spec["template"] = dict(mapping_at(job_spec, "template", runtime_obj, f"{where}.template.spec", errors))
    parallelism = count(job_spec, "parallelism", 1, runtime_obj, f"{where}.template.spec", errors)
    job_spec["parallelism"] = job_spec["completions"] = policy.pods(rjob.get("name"), step, parallelism)
    job_spec.setdefault("completionMode", "Indexed")
    if step in ONE_JOB_STEPS:
        out["replicas"] = 1
    if policy.sized(rjob.get("name"), step):
        pod_spec = pod["spec"] = dict(mapping_at(pod, "spec", runtime_obj, f"{where}.template.spec.template", errors))
        containers = list_at(pod_spec, "containers", runtime_obj, f"{where}.template.spec.template.spec", errors)
        pod_spec["containers"] = [
            _resources(c, policy.per_node) if isinstance(c, Mapping) and c.get("name") == NODE else c
            for c in containers
        ]
    return out


def _resources(container: Mapping[str, Any], per_node: Mapping[str, Any]) -> JSON:
    """resourcesPerNode over a container's resources: limits and requests key by key."""
    out = dict(container)
    resources = dict(out.get("resources") or {})
    for key in ("limits", "requests", "claims"):
        value = per_node.get(key)
        if isinstance(value, Mapping):
            resources[key] = {**(resources.get(key) or {}), **value}
        elif value is not None:
            resources[key] = copy.deepcopy(value)
    out["resources"] = resources
    return out


def _strings(raw: Any) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in raw.items() if v is not None}
