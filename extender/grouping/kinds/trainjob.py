"""Kubeflow Trainer's TrainJob (`trainer.kubeflow.org/v1alpha1`, Trainer v2; read at v2.3.0).

Trainer runs a TrainJob as a JobSet of the same name, made from the TrainJob's runtime (a
TrainingRuntime in its namespace or a ClusterTrainingRuntime, `spec.runtimeRef`) and owned by it:
Pod -> Job -> JobSet -> TrainJob. The gang is the TrainJob's, with the tree of that JobSet
(`jobset.read_jobset`: one SubGroup per replicated Job and Job index):

    PodGroup <ns>/trainjob-<name>     the TrainJob's own placement annotations (metadata), over
    │                                 the JobSet's (the runtime's spec.template.metadata and the
    │                                 runtime patches' template.metadata, which Trainer copies there)
    └── node                          the JobSet's replicated Jobs: their Job and pod templates
        └── node-0                    carry the runtime's template annotations and the patches'

The grouper reads the JobSet Trainer made, not the runtime: that JobSet is what the pods were
made from (Trainer keeps a snapshot of the runtime; a runtime changed since does not change the
JobSet). The TrainJob's own annotations win over the JobSet's for the same attribute.

Synthesized (`trainjob_runtime`): TrainJob -> JobSet <tj> -> Job <tj>-<rjob>-<j> -> Pod
<tj>-<rjob>-<j>-<i>, from the runtime given in the input, or from the TrainJob's JobSet when that
is given (as Trainer made it).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from extender.grouping import names as n
from extender.grouping.annotations import placement
from extender.grouping.grouper import Claim, Classifier, GangDraft, Link, WorkloadDraft
from extender.grouping.kinds.common import gang
from extender.grouping.kinds.jobset import jobset_pods, read_jobset
from extender.grouping.kinds.kind import WorkloadKind, owner
from extender.grouping.kinds.trainjob_runtime import made_jobset
from extender.grouping.synthesis import Synthesis
from extender.grouping.values import annotation_keys, annotations_of, controller_ref, mapping_at
from extender.model.annotation_keys import MOVABLE
from extender.model.errors import FieldError
from extender.model.labels import ON_UNREPAIRABLE
from extender.model.pod import PodInfo
from extender.model.raw import literal

API = "trainer.kubeflow.org/v1alpha1"
GROUP = "trainer.kubeflow.org"
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
CLUSTER_RUNTIME = "ClusterTrainingRuntime"  # spec.runtimeRef.kind's default
RUNTIME_REF = "spec.runtimeRef"
# TrainJob spec fields at v2.3.0, and those of earlier releases that it replaced.
_SPEC_FIELDS = frozenset(
    {"runtimeRef", "initializer", "trainer", "runtimePatches", "suspend", "activeDeadlineSeconds", "managedBy"}
)
_OLDER_FIELDS = {
    "labels": "Trainer v2.0 and v2.1",
    "annotations": "Trainer v2.0 and v2.1",
    "podSpecOverrides": "Trainer v2.0",
    "podTemplateOverrides": "Trainer v2.1",
}
_ATTRIBUTE = dict(n.PLACEMENT_SPELLINGS)  # placement annotation -> the attribute it sets
_GANG_WIDE = (n.KAI_TOPOLOGY, ON_UNREPAIRABLE, MOVABLE)  # read from the workload's metadata, not a constraint


def group_trainjob(link: Link) -> WorkloadDraft:
    key = link.key()
    gangs: dict[str, GangDraft] = {}
    joined: dict[str, Classifier] = {}  # the JobSet's name -> how its pods join the gang

    def classify(pod: PodInfo, below: Sequence[Link]) -> Claim | None:
        js = below[-1] if below else None
        if js is None or js.gvk != (JOBSET_API, "JobSet") or js.obj is None:
            return None  # not made by Trainer (its pods come through the JobSet): the rule for other owners
        if not joined:
            joined[js.ref.name] = _read(link, js, gangs)
        if js.ref.name not in joined:
            why = f"{js.label} is a second JobSet of {link.label} (the first: {next(iter(joined))})"
            return Claim(key, None, FieldError(f"Pod {pod.key}", "metadata.ownerReferences", why))
        return joined[js.ref.name](pod, below[:-1])

    return WorkloadDraft(gangs, classify, link.label, link.label, link.ref)


def _read(link: Link, js: Link, gangs: dict[str, GangDraft]) -> Classifier:
    """The TrainJob's gang from its JobSet JS: the JobSet's tree, the TrainJob's name and owner."""
    draft = gang(link, [], [])
    gangs[draft.key] = draft
    classify = read_jobset(js, draft)
    own = draft.annotations
    theirs = annotations_of(js.obj or {})
    annotation_keys(theirs, js.label, "", draft.errors, draft.warnings)
    # The JobSet's placement, for what the TrainJob does not say itself: a constraint of the
    # JobSet's (errors name its fields), under the TrainJob's own.
    said = {_ATTRIBUTE[a] for a in own if a in _ATTRIBUTE}
    kept = {a: v for a, v in theirs.items() if _ATTRIBUTE.get(a) not in said}
    draft.global_constraint = placement(kept, js.label, "", None, draft.errors)
    draft.annotations = {**{k: kept[k] for k in _GANG_WIDE if k in kept}, **own}
    return classify


def synthesize_trainjob(out: Synthesis) -> None:
    """The JobSet Trainer would make (from the TrainJob's JobSet given in the input, else from
    its runtime), then that JobSet's Jobs and pods."""
    given = out.get(JOBSET_API, "JobSet", out.namespace, out.name)
    ref = controller_ref(given) if given is not None else None
    if given is not None and ref is not None and (ref.kind, ref.name) == ("TrainJob", out.name):
        meta = mapping_at(given, "metadata", f"JobSet {out.namespace}/{out.name}", "", out.errors)
        js_spec = mapping_at(given, "spec", f"JobSet {out.namespace}/{out.name}", "", out.errors)
        labels = _strs(meta.get("labels"))
        js_ref = out.owner(JOBSET_API, "JobSet", out.name, out.ref(), labels, js_spec, annotations_of(given))
        jobset_pods(out, out.name, js_spec, js_ref, f"JobSet {out.namespace}/{out.name}", "spec")
        return
    _spec_fields(out)
    found = _runtime(out)
    if found is None:
        return
    runtime, runtime_obj = found
    made = made_jobset(out.name, out.spec, runtime, runtime_obj, out.obj, out.errors)
    if out.errors:
        return
    js_ref = out.owner(JOBSET_API, "JobSet", out.name, out.ref(), made.labels, made.spec, made.annotations)
    jobset_pods(out, out.name, made.spec, js_ref, runtime_obj, "spec.template.spec")


def _spec_fields(out: Synthesis) -> None:
    """TrainJob spec fields of Trainer v2.3.0 only: an older field or a typo would change nothing
    in the pods made, without a word."""
    for key in out.spec:
        if key in _SPEC_FIELDS:
            continue
        if key in _OLDER_FIELDS:
            why = (
                f"is {_OLDER_FIELDS[key]}'s field; topogang makes a TrainJob's pods as Trainer v2.3.0 does,"
                " with spec.runtimePatches[].trainingRuntimeSpec.template for what it set"
            )
        else:
            close = difflib.get_close_matches(str(key), sorted(_SPEC_FIELDS), n=1)
            why = (
                f"unknown field; did you mean {close[0]}?"
                if close
                else f"unknown field (known: {', '.join(sorted(_SPEC_FIELDS))})"
            )
        out.errors.append(FieldError(out.obj, f"spec.{key}", why))


def _runtime(out: Synthesis) -> tuple[Mapping[str, Any], str] | None:
    """The runtime the TrainJob names and how errors name it; None (an error said) when absent."""
    ref = mapping_at(out.spec, "runtimeRef", out.obj, "spec", out.errors)
    name, kind, group = ref.get("name"), ref.get("kind", CLUSTER_RUNTIME), ref.get("apiGroup", GROUP)
    if not isinstance(name, str) or not name:
        out.errors.append(FieldError(out.obj, f"{RUNTIME_REF}.name", f"expected a runtime's name, got {literal(name)}"))
        return None
    if group != GROUP or kind not in RUNTIME_KINDS:
        what = f"expected {' or '.join(RUNTIME_KINDS)} of {GROUP}, got {kind} of {group}"
        out.errors.append(FieldError(out.obj, RUNTIME_REF, what))
        return None
    namespace = out.namespace if kind == "TrainingRuntime" else None
    runtime = out.get(API, kind, namespace, name)
    label = f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"
    if runtime is None:
        why = (
            f"names {label}, which is not in the input: give it (kubectl get {kind.lower()} {name} -o yaml),"
            " or the JobSet Trainer made for this TrainJob"
        )
        out.errors.append(FieldError(out.obj, f"{RUNTIME_REF}.name", why))
        return None
    return runtime, label


def _strs(raw: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}


KINDS = (WorkloadKind(owner(GROUP, "v1alpha1", "TrainJob", "trainjobs"), group_trainjob, synthesize_trainjob),)
