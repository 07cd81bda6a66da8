"""Reading a PodGang (scheduler.grove.io/v1alpha1) into a gang, and the PodCliqueSet's grouper that
joins each pod to the gang of the PodGang it names (see the package docstring)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from extender.grouping import names as n
from extender.grouping.grouper import Claim, GangDraft, Link, Part, WorkloadDraft
from extender.grouping.kinds.grove.names import PODCLIQUE, PODGANG, PODGANG_KIND, SCHEDULER_V1, TOPOLOGY_NAME
from extender.grouping.values import annotations_of, label_field, level, list_at, mapping_at
from extender.model.errors import FieldError
from extender.model.labels import TOPOLOGY_ANNOTATION
from extender.model.limits import MAX_REPLICAS, MAX_SUBGROUPS, beyond
from extender.model.pod import OwnerRef, PodInfo
from extender.model.podgroup import SubGroupSpec, TopologyConstraint
from extender.model.raw import json_type, literal


def _pack(parent: Mapping[str, Any], obj: str, where: str, errors: list[FieldError]) -> TopologyConstraint | None:
    """`<where>.topologyConstraint.packConstraint`: node label keys, required and preferred."""
    tc_where = f"{where}.topologyConstraint" if where else "topologyConstraint"
    tc = mapping_at(parent, "topologyConstraint", obj, where, errors)
    pack = mapping_at(tc, "packConstraint", obj, tc_where, errors)
    at = f"{tc_where}.packConstraint"
    levels: dict[str, str | None] = {}
    for attr in ("required", "preferred"):
        value = pack.get(attr)
        if value is not None and not isinstance(value, str):
            errors.append(FieldError(obj, f"{at}.{attr}", f"expected a node label key, got {literal(value)}"))
            value = None
        levels[attr] = level(value or None, obj, f"{at}.{attr}", errors)
    if not levels["required"] and not levels["preferred"]:
        return None
    return TopologyConstraint(
        required=levels["required"],
        preferred=levels["preferred"],
        field=at,
        required_fields=(f"{at}.required",) if levels["required"] else (),
        obj=obj,
        preferred_at=f"{at}.preferred",
    )


@dataclass
class _PodGang:
    """One PodGang read: its gang, and which PodGroup lists which pod."""

    draft: GangDraft
    listed: dict[str, tuple[str, str]] = field(default_factory=dict)  # pod name -> (PodGroup, its field)
    names: set[str] = field(default_factory=set)  # its PodGroups (sets: a PodGang may list thousands)


def _references(pg: Mapping[str, Any], ns: str, obj: str, where: str, gang: _PodGang, name: str) -> int:
    errors = gang.draft.errors
    refs = list_at(pg, "podReferences", obj, where, errors)
    for k, raw in enumerate(refs):
        at = f"{where}.podReferences[{k}]"
        ref: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        pod, pod_ns = ref.get("name"), ref.get("namespace")
        if not isinstance(pod, str) or not pod or not isinstance(pod_ns, str):
            errors.append(FieldError(obj, at, f"expected {{namespace, name}}, got {literal(raw)}"))
        elif pod_ns != ns:
            why = f"is {pod_ns!r}: a PodGang lists pods of its own namespace {ns!r} only"
            errors.append(FieldError(obj, f"{at}.namespace", why))
        elif pod in gang.listed:
            why = f"lists Pod {pod}, which {gang.listed[pod][1]} lists already"
            errors.append(FieldError(obj, at, why))
        else:
            gang.listed[pod] = (name, f"{where}.podReferences")
    return len(refs)


def _podgroups(spec: Mapping[str, Any], ns: str, obj: str, gang: _PodGang) -> list[Part]:
    """spec.podgroups: one Part per PodGroup (parents are set later)."""
    errors = gang.draft.errors
    raws = list_at(spec, "podgroups", obj, "spec", errors)
    if len(raws) > MAX_SUBGROUPS:
        errors.append(FieldError(obj, "spec.podgroups", f"has {len(raws):,} PodGroups; {beyond(MAX_SUBGROUPS)}"))
        raws = []
    parts: list[Part] = []
    for i, raw in enumerate(raws):
        where = f"spec.podgroups[{i}]"
        pg: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        if not isinstance(raw, Mapping):
            errors.append(FieldError(obj, where, f"expected an object, got {json_type(raw)}"))
        name = pg.get("name")
        if not isinstance(name, str) or not name:
            errors.append(FieldError(obj, f"{where}.name", f"expected a non-empty name, got {literal(name)}"))
            continue
        if name in gang.names:
            errors.append(FieldError(obj, f"{where}.name", f"{name!r} is listed twice"))
            continue
        gang.names.add(name)
        minimum = pg.get("minReplicas")
        if not isinstance(minimum, int) or isinstance(minimum, bool) or minimum < 1:
            errors.append(FieldError(obj, f"{where}.minReplicas", f"expected an integer >= 1, got {literal(minimum)}"))
            minimum = 1
        elif minimum > MAX_REPLICAS:
            errors.append(FieldError(obj, f"{where}.minReplicas", f"is {minimum:,}; {beyond(MAX_REPLICAS)}"))
            minimum = 1
        listed = _references(pg, ns, obj, where, gang, name)
        c = _pack(pg, obj, where, errors)
        if c is not None:
            gang.draft.constraints[name] = c
        parts.append(Part(name, min(max(listed, minimum), MAX_REPLICAS), minimum))
    return parts


def _group_configs(spec: Mapping[str, Any], obj: str, gang: _PodGang) -> dict[str, str]:
    """spec.topologyConstraintGroupConfigs: a parent SubGroup per entry; PodGroup -> its parent."""
    draft = gang.draft
    errors, names = draft.errors, gang.names
    parent_of: dict[str, str] = {}
    groups: set[str] = set()
    for j, raw in enumerate(list_at(spec, "topologyConstraintGroupConfigs", obj, "spec", errors)):
        where = f"spec.topologyConstraintGroupConfigs[{j}]"
        cfg: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        name = cfg.get("name")
        members = cfg.get("podGroupNames")
        if not isinstance(name, str) or not name:
            errors.append(FieldError(obj, f"{where}.name", f"expected a non-empty name, got {literal(name)}"))
            continue
        if name in names or name in groups:
            errors.append(FieldError(obj, f"{where}.name", f"{name!r} is taken by another PodGroup or group"))
            continue
        if members is not None and (not isinstance(members, list) or not all(isinstance(m, str) for m in members)):
            errors.append(
                FieldError(obj, f"{where}.podGroupNames", f"expected a list of names, got {literal(members)}")
            )
            continue
        if not members:
            continue  # groups nothing (KAI skips it too)
        for m in members:
            if m not in names:
                have = ", ".join(p.name for p in draft.parts)
                why = f"names {m!r}, which spec.podgroups does not list (have: {have})"
                errors.append(FieldError(obj, f"{where}.podGroupNames", why))
            elif m in parent_of:
                why = f"{m!r} is in {parent_of[m]!r} already: a PodGroup belongs to one group"
                errors.append(FieldError(obj, f"{where}.podGroupNames", why))
            else:
                parent_of[m] = name
        groups.add(name)
        draft.parents.append(SubGroupSpec(name, None))  # every member required, as in the PodGang
        c = _pack(cfg, obj, where, errors)
        if c is not None:
            draft.constraints[name] = c
    return parent_of


def _annotations(
    body: Mapping[str, Any], spec_c: TopologyConstraint | None, obj: str, warnings: list[str]
) -> dict[str, str]:
    """The PodGang's annotations as the workload's: Grove's topology name as kai.scheduler/topology,
    and KAI's placement annotations only where the PodGang's own constraint is silent (KAI's order)."""
    ann = annotations_of(body)
    if ann.get(TOPOLOGY_NAME):
        ann[TOPOLOGY_ANNOTATION] = ann[TOPOLOGY_NAME]
    for annotation, attr in n.PLACEMENT_SPELLINGS:
        if spec_c is not None and getattr(spec_c, attr) and annotation in ann:
            warnings.append(f"{obj}: {annotation} ignored: spec.topologyConstraint.packConstraint.{attr} sets it")
            del ann[annotation]
    return ann


def read_podgang(link: Link, name: str, body: Mapping[str, Any]) -> _PodGang:
    ns = link.namespace
    obj = f"PodGang {ns}/{name}"
    errors: list[FieldError] = []
    warnings: list[str] = []
    spec = mapping_at(body, "spec", obj, "", errors)
    spec_c = _pack(spec, obj, "spec", errors)
    meta = body.get("metadata")
    uid = str(meta.get("uid") or "") if isinstance(meta, Mapping) else ""
    draft = GangDraft(
        key=f"{ns}/podgang-{name}",
        source=f"{obj} (of {link.label})",
        obj=obj,
        owner=OwnerRef(SCHEDULER_V1, PODGANG_KIND, name, uid, True),
        annotations=_annotations(body, spec_c, obj, warnings),
        errors=errors,
        warnings=warnings,
        uid=uid,
    )
    draft.global_constraint = spec_c
    gang = _PodGang(draft)
    draft.parts = _podgroups(spec, ns, obj, gang)
    parent_of = _group_configs(spec, obj, gang)
    draft.parts = [Part(p.name, p.replicas, p.minimum, parent=parent_of.get(p.name)) for p in draft.parts]
    return gang


def _clique_of(pod: PodInfo, below: Sequence[Link]) -> str | None:
    """The pod's PodClique: its controller (Grove's), else its grove.io/podclique label."""
    if below and below[0].ref.kind == "PodClique":
        return below[0].ref.name
    return pod.labels.get(PODCLIQUE)


def group_podcliqueset(link: Link) -> WorkloadDraft:
    gangs: dict[str, GangDraft] = {}
    read: dict[str, _PodGang] = {}

    def classify(pod: PodInfo, below: Sequence[Link]) -> Claim:
        who = f"Pod {pod.key}"
        name = pod.labels.get(PODGANG)
        if not name:
            why = "missing: Grove names the pod's PodGang in it"
            return Claim(link.key(), None, FieldError(who, label_field(PODGANG), why))
        key = f"{link.namespace}/podgang-{name}"
        if name not in read:
            body = link.objects.get(SCHEDULER_V1, PODGANG_KIND, link.namespace, name) if link.objects else None
            if body is None:
                why = (
                    f"PodGang {link.namespace}/{name} (its {PODGANG} label) is not visible yet; it decides the PodGroup"
                )
                return Claim(key, None, wait=why)
            read[name] = read_podgang(link, name, body)
            gangs[key] = read[name].draft
        gang = read[name]
        clique = _clique_of(pod, below)
        if clique not in gang.names:
            have = ", ".join(p.name for p in gang.draft.parts)
            why = f"names {gang.draft.obj}, which has no PodGroup for its PodClique {clique} (have: {have})"
            return Claim(key, None, FieldError(who, label_field(PODGANG), why))
        listed = gang.listed.get(pod.name)
        if listed is not None and listed[0] != clique:
            why = f"lists Pod {pod.name} under {listed[0]}, but its PodClique is {clique}"
            return Claim(key, None, FieldError(gang.draft.obj, listed[1], why))
        return Claim(key, clique)

    return WorkloadDraft(gangs, classify, link.label, link.label, link.ref)
