"""LeaderWorkerSet (the LWS subgroup KEP): one PodGroup per group (replica) of leader + workers.

    PodGroup <ns>/leaderworkerset-<name>-<group index>     exclusive-topology: required + exclusive
    ├── leader    minMember 1
    └── workers   minMember size-1; worker index = worker-index - 1 (the leader is index 0)

Without a leaderTemplate the leader is made from the workerTemplate, whose annotations
(placement, segments) are then read for the workers only.

With `leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology` and `subGroupPolicy.subGroupSize`
the group is cut into SubGroups `subgroup-<i>` instead, each required and exclusive at that
level; the leader sits in subgroup 0 (or its own SubGroup `leader` with LeaderExcluded). A
worker's subgroup is worker-index / subGroupSize, or (worker-index - 1) / subGroupSize when the
leader requests no accelerator or is the extra pod (size - 1 divisible by subGroupSize while
size is not), as LWS labels them.

Synthesized: LWS -> StatefulSet `<lws>` -> leader Pod `<lws>-<g>`; leader Pod -> StatefulSet
`<lws>-<g>` -> worker Pod `<lws>-<g>-<w>` (w = 1..size-1).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from extender.grouping import names as n
from extender.grouping.grouper import Claim, Classifier, GangDraft, Link, Part, WorkloadDraft
from extender.grouping.kinds.common import body, gang, spec, template
from extender.grouping.kinds.kind import WorkloadKind, owner
from extender.grouping.synthesis import Synthesis, owner_ref, uid_for
from extender.grouping.values import (
    ann_field,
    annotation_keys,
    annotations_of,
    count,
    label_field,
    level,
    mapping_at,
    positive_int,
)
from extender.model import annotation_keys as keys
from extender.model.errors import ErrorList, FieldError
from extender.model.pod import PodInfo
from extender.model.podgroup import TopologyConstraint
from extender.model.requests import effective_requests

NAME = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
GROUP_KEY = "leaderworkerset.sigs.k8s.io/group-key"
SIZE = "leaderworkerset.sigs.k8s.io/size"
LEADER_NAME = "leaderworkerset.sigs.k8s.io/leader-name"
SUBGROUP_INDEX = "leaderworkerset.sigs.k8s.io/subgroup-index"
SUBGROUP_SIZE = "leaderworkerset.sigs.k8s.io/subgroup-size"
SUBGROUP_KEY = "leaderworkerset.sigs.k8s.io/subgroup-key"
EXCLUSIVE = keys.LWS_EXCLUSIVE
SUBGROUP_EXCLUSIVE = keys.LWS_SUBGROUP_EXCLUSIVE
LEADER_COUNT = 1  # one leader per group; workers' worker-index starts after it

# Extended resources that count as an accelerator (LWS shifts subgroup indexes when the leader
# requests none, the LWS subgroup KEP).
ACCELERATOR_RESOURCES = frozenset(
    {"nvidia.com/gpu", "amd.com/gpu", "google.com/tpu", "intel.com/gpu", "habana.ai/gaudi", "aws.amazon.com/neuron"}
)

LEADER, WORKERS = "leader", "workers"
_WHERE = "spec.leaderWorkerTemplate"
_SGS_FIELD = f"{_WHERE}.subGroupPolicy.subGroupSize"
_TEMPLATE_ANNOTATIONS = (
    n.KAI_REQUIRED,
    n.KAI_PREFERRED,
    *n.KAI_SEGMENT_ANNOTATIONS,
    n.KUEUE_REQUIRED,
    n.KUEUE_PREFERRED,
    n.KUEUE_REQUIRE,
    n.KUEUE_PREFER,
    n.KUEUE_SLICE_REQUIRED,
    n.KUEUE_SLICE_SIZE,
    n.KUEUE_SLICE_CONSTRAINTS,
)


def is_accelerator(resource: str) -> bool:
    return (
        resource in ACCELERATOR_RESOURCES
        or resource.endswith(("/gpu", "/tpu"))
        or resource.startswith(("nvidia.com/mig-", "aws.amazon.com/neuron"))
    )


def requests_accelerator(template_body: Mapping[str, Any]) -> bool:
    pod_spec = template_body.get("spec")
    if not isinstance(pod_spec, Mapping):
        return False
    requests = effective_requests(pod_spec, ErrorList("template"))
    return any(is_accelerator(r) and v > 0 for r, v in requests.items())


def subgroup_index(worker: int, size: int, sgs: int, shift: bool, excluded: bool) -> int | None:
    """The subgroup of worker-index `worker` (None: the leader, outside every subgroup)."""
    if worker == 0:
        return None if excluded else 0
    return (worker - 1) // sgs if shift or excluded else worker // sgs


def subgroup_key(leader: str, index: int) -> str:
    """The subgroup-key label the LWS pod webhook sets: sha1 of "<leader pod>/<subgroup index>"."""
    return hashlib.sha1(f"{leader}/{index}".encode(), usedforsecurity=False).hexdigest()


@dataclass(frozen=True)
class _Shape:
    """How a group's pods are cut: by worker index into leader/workers, or into subgroups."""

    replicas: int  # groups
    size: int  # pods per group, the leader included
    sgs: int | None  # subGroupSize, when the group is cut into subgroups
    shift: bool = False  # worker indexes shifted by the leader (the LWS subgroup KEP)
    excluded: bool = False  # LeaderExcluded: the leader is outside every subgroup

    def part_of(self, worker: int) -> str:
        if self.sgs is None:
            return LEADER if worker == 0 else WORKERS
        i = subgroup_index(worker, self.size, self.sgs, self.shift, self.excluded)
        return LEADER if i is None else f"subgroup-{i}"


def _subgroup_size(lwt: Mapping[str, Any], size: int, obj: str, errors: list[FieldError]) -> int | None:
    """subGroupPolicy.subGroupSize, when LWS can cut a group of `size` pods by it."""
    policy = mapping_at(lwt, "subGroupPolicy", obj, _WHERE, errors)
    sgs = positive_int(policy.get("subGroupSize"), obj, _SGS_FIELD, errors)
    excluded = policy.get("subGroupPolicyType") == "LeaderExcluded"
    if sgs is not None and sgs > size:
        errors.append(FieldError(obj, _SGS_FIELD, f"is {sgs}, more than the group size {size}"))
        return None
    if sgs is not None and size % sgs and (size - 1) % sgs:
        errors.append(FieldError(obj, _SGS_FIELD, f"{sgs} divides neither the size {size} nor size - 1"))
        return None
    if sgs is not None and excluded and (size - 1) % sgs:
        errors.append(FieldError(obj, _SGS_FIELD, f"LeaderExcluded needs size - 1 = {size - 1} divisible by {sgs}"))
        return None
    return sgs


def _classifier(link: Link, shape: _Shape) -> Classifier:
    replicas, size = shape.replicas, shape.size

    def classify(pod: PodInfo, below: Sequence[Link]) -> Claim:
        raw_group = pod.labels.get(GROUP_INDEX)
        if raw_group is None or not raw_group.isdigit() or int(raw_group) >= replicas:
            why = "missing" if raw_group is None else f"{raw_group!r} is not a group index 0..{replicas - 1}"
            return Claim(link.key(), None, FieldError(f"Pod {pod.key}", label_field(GROUP_INDEX), why))
        key = link.key(f"-{raw_group}")
        raw_worker = pod.labels.get(WORKER_INDEX)
        if raw_worker is None or not raw_worker.isdigit() or int(raw_worker) >= size:
            why = "missing" if raw_worker is None else f"{raw_worker!r} is not a worker index 0..{size - 1}"
            return Claim(key, None, FieldError(f"Pod {pod.key}", label_field(WORKER_INDEX), why))
        return Claim(key, shape.part_of(int(raw_worker)))

    return classify


def group_lws(link: Link) -> WorkloadDraft:
    obj = link.label
    errors: list[FieldError] = []
    warnings: list[str] = []
    s = spec(link, errors)
    replicas = count(s, "replicas", 1, obj, "spec", errors)
    lwt = mapping_at(s, "leaderWorkerTemplate", obj, "spec", errors)
    size = count(lwt, "size", 1, obj, _WHERE, errors)
    if size < 1:
        errors.append(FieldError(obj, f"{_WHERE}.size", f"expected an integer >= 1, got {size}"))
        size = 1
    worker_raw, worker_ann, worker_where = template(lwt, "workerTemplate", obj, _WHERE, errors)
    if "leaderTemplate" in lwt:
        leader_raw, leader_ann, leader_where = template(lwt, "leaderTemplate", obj, _WHERE, errors)
    else:  # the leader is made from the worker template; its annotations are the workers'
        leader_raw, leader_ann, leader_where = worker_raw, {}, worker_where

    meta = annotations_of(body(link))
    exclusive = level(meta.get(EXCLUSIVE), obj, ann_field("", EXCLUSIVE), errors)
    sub_level = level(meta.get(SUBGROUP_EXCLUSIVE), obj, ann_field("", SUBGROUP_EXCLUSIVE), errors)
    written = mapping_at(lwt, "subGroupPolicy", obj, _WHERE, []).get("subGroupSize")
    if sub_level is not None and written is None:
        warnings.append(f"{obj}: {SUBGROUP_EXCLUSIVE}={sub_level} ignored: no {_SGS_FIELD}")
        sub_level = None
    sgs = _subgroup_size(lwt, size, obj, errors)

    parts: list[Part]
    if sub_level is not None and sgs is not None:
        excluded = mapping_at(lwt, "subGroupPolicy", obj, _WHERE, []).get("subGroupPolicyType") == "LeaderExcluded"
        shift = not requests_accelerator(leader_raw) or ((size - 1) % sgs == 0 and size % sgs != 0)
        shape = _Shape(replicas, size, sgs, shift, excluded)
        members: dict[str, int] = {}
        for w in range(size):
            name = shape.part_of(w)
            members[name] = members.get(name, 0) + 1
        parts = [Part(name, c, c) for name, c in members.items()]
        for t_ann, t_where in ((leader_ann, leader_where), (worker_ann, worker_where)):
            annotation_keys(t_ann, obj, t_where, errors, warnings)  # no part carries these templates
            ignored = [a for a in _TEMPLATE_ANNOTATIONS if a in t_ann]
            if ignored:
                why = f"{SUBGROUP_EXCLUSIVE} cuts the group into subgroups"
                warnings.append(f"{obj} {t_where}: {', '.join(ignored)} ignored: {why}")
    else:
        shape = _Shape(replicas, size, None)
        parts = [Part(LEADER, 1, 1, leader_ann, leader_where, index_label=WORKER_INDEX)]
        if size > 1:
            offset = LEADER_COUNT
            parts.append(Part(WORKERS, size - 1, size - 1, worker_ann, worker_where, None, WORKER_INDEX, offset))

    gangs: dict[str, GangDraft] = {}
    for g in range(replicas):
        draft = gang(link, list(parts), list(errors), link.key(f"-{g}"), f"{obj} group {g}")
        draft.warnings = list(warnings)
        if exclusive is not None:
            field = ann_field("", EXCLUSIVE)
            draft.global_constraint = TopologyConstraint(
                required=exclusive, field=field, exclusive=True, required_fields=(field,), obj=obj
            )
        if shape.sgs is not None:
            field = ann_field("", SUBGROUP_EXCLUSIVE)
            for p in parts:
                if p.name != LEADER:
                    draft.constraints[p.name] = TopologyConstraint(
                        required=sub_level, field=field, exclusive=True, required_fields=(field,), obj=obj
                    )
        gangs[draft.key] = draft
    return WorkloadDraft(gangs, _classifier(link, shape), obj, obj, link.ref)


def synthesize_lws(out: Synthesis) -> None:
    replicas = count(out.spec, "replicas", 1, out.obj, "spec", out.errors)
    lwt = mapping_at(out.spec, "leaderWorkerTemplate", out.obj, "spec", out.errors)
    where = "spec.leaderWorkerTemplate"
    size = max(count(lwt, "size", 1, out.obj, where, out.errors), 1)
    worker_t = mapping_at(lwt, "workerTemplate", out.obj, where, out.errors)
    leader_t = mapping_at(lwt, "leaderTemplate", out.obj, where, out.errors) if "leaderTemplate" in lwt else worker_t
    policy = mapping_at(lwt, "subGroupPolicy", out.obj, where, out.errors)
    # a bad subGroupSize makes the group Invalid in the grouper; the pods can still be made
    sgs = positive_int(policy.get("subGroupSize"), out.obj, f"{where}.subGroupPolicy.subGroupSize", [])
    excluded = policy.get("subGroupPolicyType") == "LeaderExcluded"
    shift = sgs is not None and (not requests_accelerator(leader_t) or ((size - 1) % sgs == 0 and size % sgs != 0))
    base = {NAME: out.name}

    def subgroup(leader: str, w: int) -> dict[str, str]:
        i = None if sgs is None else subgroup_index(w, size, sgs, shift, excluded)
        return {} if i is None else {SUBGROUP_INDEX: str(i), SUBGROUP_KEY: subgroup_key(leader, i)}

    size_ann = {SIZE: str(size)}
    if sgs is not None:
        size_ann[SUBGROUP_SIZE] = str(sgs)
    leader_sts = out.owner(n.APPS_V1, "StatefulSet", out.name, out.ref(), base, {"replicas": replicas})
    out.expect(replicas * size, "spec.replicas")
    for g in range(replicas):
        leader_name = f"{out.name}-{g}"
        group = {**base, GROUP_INDEX: str(g), GROUP_KEY: uid_for("group", out.namespace, leader_name)}
        leader_labels = {**group, WORKER_INDEX: "0", **subgroup(leader_name, 0)}
        leader = out.pod(leader_name, leader_t, leader_sts, leader_labels, size_ann)
        if size == 1:
            continue
        leader_ref = owner_ref("v1", "Pod", leader_name, str(leader["metadata"]["uid"]))
        workers_sts = out.owner(n.APPS_V1, "StatefulSet", leader_name, leader_ref, group, {"replicas": size - 1})
        for w in range(1, size):
            labels = {**group, WORKER_INDEX: str(w), **subgroup(leader_name, w)}
            out.pod(f"{leader_name}-{w}", worker_t, workers_sts, labels, {**size_ann, LEADER_NAME: leader_name})


KINDS = (
    WorkloadKind(
        owner("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "leaderworkersets"),
        group_lws,
        synthesize_lws,
        WORKER_INDEX,
    ),
)
