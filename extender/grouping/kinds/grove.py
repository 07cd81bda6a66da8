"""Grove (NVIDIA's ai-dynamo/grove): disaggregated inference as a PodCliqueSet of PodCliques and
PodCliqueScalingGroups. Checked against Grove's source at its newest release v0.1.0-alpha.11
(commit 8fa3ece93434d7c0005605b7dc4b0e23610af88b; the API is unchanged at v0.1.0-alpha.12-rc1,
19905d53, and at main, fcc3b3bb): `operator/api/core/v1alpha1` (grove.io) and
`scheduler/api/core/v1alpha1` (scheduler.grove.io), names from `operator/api/common`.

Which object: the PodGang, as KAI's Grove pod-grouper plugin groups (NVIDIA/KAI-Scheduler
`pkg/podgrouper/podgrouper/plugins/grove`, read at 72de64fc). Grove publishes for the scheduler
the gangs it wants: one base PodGang `<pcs>-<replica>` per PodCliqueSet replica (its standalone
PodCliques and the scaling groups' replicas below minAvailable) and one scaled PodGang
`<pcsg>-<k>` per scaling-group replica beyond it. Each pod names its PodGang in the label
`grove.io/podgang`. The grouper is registered on the PodCliqueSet (the pods' top owner, as in
KAI) and reads that PodGang:

    PodGroup <ns>/podgang-<podgang>     spec.topologyConstraint.packConstraint (required, preferred)
    ├── <pcs>-0-<clique>                a spec.podgroups entry (one PodClique): minMember = minReplicas,
    │                                   its topologyConstraint.packConstraint; pods: the PodClique's
    └── <pcs>-0-<sg>-<j>                a spec.topologyConstraintGroupConfigs entry (one replica of a
        ├── <pcs>-0-<sg>-<j>-<clique>   scaling group): a SubGroup over its podGroupNames, all
        └── ...                         required, with its packConstraint

Levels are the node label keys Grove translated the user's domains to (through its
ClusterTopologyBinding); topogang resolves them against the Topology named by the PodGang's
`grove.io/topology-name` annotation (the KAI Topology Grove keeps under the binding's name), else
`kai.scheduler/topology`, else the only Topology. KAI's placement annotations mirrored from the
PodCliqueSet fill in what the PodGang's own constraint leaves unset (KAI's order). A pod joins
the SubGroup of its PodClique (its controller); one listed in another PodGroup's podReferences,
or a reference to another namespace (KAI refuses those), makes the gang Invalid. A pod whose
PodGang is not visible yet waits. `spec.priorityClassName` is not read: a gang's priority is its
pods'. Unknown fields are not reported (as for other workload objects: Grove writes them).
DynamoGraphDeployment -> PodCliqueSet: Dynamo's object is not read; a ResourceInterface on it
without podGroups hands off to this grouper (KAI's generic pod-grouping design).

Synthesized as Grove's operator would create them, for each PodCliqueSet replica r:
PodCliqueSet -> PodClique `<pcs>-<r>-<clique>` -> Pod `<pclq>-<i>`; PodCliqueSet ->
PodCliqueScalingGroup `<pcs>-<r>-<sg>` -> PodClique `<pcs>-<r>-<sg>-<j>-<clique>` -> Pod; and the
PodGangs (owned by the PodCliqueSet) listing them. Grove names pods `<pclq>-<random>`: here the
suffix is the pod index. The synthesizer cannot see the ClusterTopologyBinding: it writes each
domain as the level name (`host` as the node), which topogang resolves by short name; give the
PodGangs in the input to use Grove's translation (objects in the input win).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from extender.grouping import names as n
from extender.grouping.grouper import Claim, GangDraft, Link, Part, WorkloadDraft
from extender.grouping.kinds.kind import WorkloadKind, owner
from extender.grouping.synthesis import JSON, Synthesis
from extender.grouping.values import annotations_of, count, label_field, level, list_at, mapping_at
from extender.model.errors import FieldError
from extender.model.labels import TOPOLOGY_ANNOTATION
from extender.model.limits import MAX_REPLICAS, MAX_SUBGROUPS, beyond
from extender.model.pod import OwnerRef, PodInfo
from extender.model.podgroup import SubGroupSpec, TopologyConstraint
from extender.model.raw import json_type, literal
from extender.model.resource import Resource

GROVE_V1 = "grove.io/v1alpha1"
SCHEDULER_V1 = "scheduler.grove.io/v1alpha1"
PODGANG_KIND = "PodGang"

PODGANG = "grove.io/podgang"
BASE_PODGANG = "grove.io/base-podgang"
PODCLIQUE = "grove.io/podclique"
PCS_REPLICA = "grove.io/podcliqueset-replica-index"
PCSG = "grove.io/podcliquescalinggroup"
PCSG_REPLICA = "grove.io/podcliquescalinggroup-replica-index"
POD_INDEX = "grove.io/podclique-pod-index"
TOPOLOGY_NAME = "grove.io/topology-name"
MANAGED_BY = {"app.kubernetes.io/managed-by": "grove-operator"}
PART_OF = "app.kubernetes.io/part-of"
COMPONENT = "app.kubernetes.io/component"
HOSTNAME = "kubernetes.io/hostname"


def reads(pod: PodInfo) -> tuple[tuple[str, str], ...]:
    name = pod.labels.get(PODGANG)
    return ((PODGANG_KIND, name),) if name else ()


# -- reading a PodGang ---------------------------------------------------------------------------------


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
    return TopologyConstraint(required=levels["required"], preferred=levels["preferred"], field=at)


@dataclass
class _PodGang:
    """One PodGang read: its gang, and which PodGroup lists which pod."""

    draft: GangDraft
    listed: dict[str, tuple[str, str]] = field(default_factory=dict)  # pod name -> (PodGroup, its field)


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
        if any(p.name == name for p in parts):
            errors.append(FieldError(obj, f"{where}.name", f"{name!r} is listed twice"))
            continue
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


def _group_configs(spec: Mapping[str, Any], obj: str, parts: list[Part], draft: GangDraft) -> dict[str, str]:
    """spec.topologyConstraintGroupConfigs: a parent SubGroup per entry; PodGroup -> its parent."""
    errors = draft.errors
    names = [p.name for p in parts]
    parent_of: dict[str, str] = {}
    for j, raw in enumerate(list_at(spec, "topologyConstraintGroupConfigs", obj, "spec", errors)):
        where = f"spec.topologyConstraintGroupConfigs[{j}]"
        cfg: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        name = cfg.get("name")
        members = cfg.get("podGroupNames")
        if not isinstance(name, str) or not name:
            errors.append(FieldError(obj, f"{where}.name", f"expected a non-empty name, got {literal(name)}"))
            continue
        if name in names or any(s.name == name for s in draft.parents):
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
                why = f"names {m!r}, which spec.podgroups does not list (have: {', '.join(names)})"
                errors.append(FieldError(obj, f"{where}.podGroupNames", why))
            elif m in parent_of:
                why = f"{m!r} is in {parent_of[m]!r} already: a PodGroup belongs to one group"
                errors.append(FieldError(obj, f"{where}.podGroupNames", why))
            else:
                parent_of[m] = name
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
    parts = _podgroups(spec, ns, obj, gang)
    parent_of = _group_configs(spec, obj, parts, draft)
    draft.parts = [Part(p.name, p.replicas, p.minimum, parent=parent_of.get(p.name)) for p in parts]
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
        names = [p.name for p in gang.draft.parts]
        if clique not in names:
            why = f"names {gang.draft.obj}, which has no PodGroup for its PodClique {clique} (have: {', '.join(names)})"
            return Claim(key, None, FieldError(who, label_field(PODGANG), why))
        listed = gang.listed.get(pod.name)
        if listed is not None and listed[0] != clique:
            why = f"lists Pod {pod.name} under {listed[0]}, but its PodClique is {clique}"
            return Claim(key, None, FieldError(gang.draft.obj, listed[1], why))
        return Claim(key, clique)

    return WorkloadDraft(gangs, classify, link.label, link.label, link.ref)


# -- synthesizing what Grove's operator creates --------------------------------------------------------


@dataclass(frozen=True)
class _Clique:
    name: str
    at: str  # its field path
    body: Mapping[str, Any]
    replicas: int
    minimum: int
    constraint: JSON | None


@dataclass
class _Gang:
    """A PodGang being synthesized."""

    name: str
    constraint: JSON | None
    podgroups: list[JSON] = field(default_factory=list)
    groups: list[JSON] = field(default_factory=list)


def _domain_pack(tc: Any) -> JSON | None:
    """A grove.io topologyConstraint as the PodGang's packConstraint (domains as level names)."""
    if not isinstance(tc, Mapping):
        return None
    raw = tc.get("pack")
    pack: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    required = pack.get("required") or tc.get("packDomain")  # packDomain: the deprecated spelling
    preferred = pack.get("preferred")
    out = {k: HOSTNAME if v == "host" else v for k, v in (("required", required), ("preferred", preferred)) if v}
    return {"packConstraint": out} if out else None


def _topology_name(template: Mapping[str, Any]) -> str | None:
    """The one topologyName a PodCliqueSet uses (its own, a scaling group's or a clique's)."""
    scopes = [template, *(template.get("podCliqueScalingGroups") or []), *(template.get("cliques") or [])]
    for scope in scopes:
        tc = scope.get("topologyConstraint") if isinstance(scope, Mapping) else None
        if isinstance(tc, Mapping) and tc.get("topologyName"):
            return str(tc["topologyName"])
    return None


def _cliques(out: Synthesis, template: Mapping[str, Any]) -> dict[str, _Clique]:
    cliques: dict[str, _Clique] = {}
    for _, at, raw, name in out.named(
        list_at(template, "cliques", out.obj, "spec.template", out.errors), "name", "spec.template.cliques"
    ):
        cspec = mapping_at(raw, "spec", out.obj, at, out.errors)
        replicas = count(cspec, "replicas", 1, out.obj, f"{at}.spec", out.errors)
        minimum = count(cspec, "minAvailable", replicas, out.obj, f"{at}.spec", out.errors)  # Grove's default
        cliques[name] = _Clique(name, at, raw, replicas, minimum, _domain_pack(raw.get("topologyConstraint")))
    return cliques


def _make_clique(out: Synthesis, c: _Clique, pclq: str, parent: JSON, labels: Mapping[str, str], gang: _Gang) -> None:
    """A PodClique `pclq`, its pods, and its PodGroup in `gang`."""
    cspec = mapping_at(c.body, "spec", out.obj, c.at, [])
    template_labels = {str(k): str(v) for k, v in (mapping_at(c.body, "labels", out.obj, c.at, []) or {}).items()}
    clique_labels = {**template_labels, **MANAGED_BY, PART_OF: out.name, **labels, PODGANG: gang.name}
    clique_ref = out.owner(GROVE_V1, "PodClique", pclq, parent, clique_labels, cspec)
    out.expect(c.replicas, f"{c.at}.spec.replicas")
    pod_template = {
        "metadata": {"labels": dict(clique_labels), "annotations": c.body.get("annotations") or {}},
        "spec": mapping_at(cspec, "podSpec", out.obj, f"{c.at}.spec", out.errors),
    }
    refs = []
    for i in range(c.replicas):
        pod = out.pod(f"{pclq}-{i}", pod_template, clique_ref, {PODCLIQUE: pclq, POD_INDEX: str(i)})
        pod["spec"]["hostname"] = f"{pclq}-{i}"
        refs.append({"namespace": out.namespace, "name": pod["metadata"]["name"]})
    podgroup: JSON = {"name": pclq, "podReferences": refs, "minReplicas": c.minimum}
    if c.constraint is not None:
        podgroup["topologyConstraint"] = c.constraint
    gang.podgroups.append(podgroup)


def _podgang(out: Synthesis, gang: _Gang, template: Mapping[str, Any], labels: Mapping[str, str]) -> None:
    spec: JSON = {"podgroups": gang.podgroups}
    if gang.constraint is not None:
        spec["topologyConstraint"] = gang.constraint
    if gang.groups:
        spec["topologyConstraintGroupConfigs"] = gang.groups
    priority = template.get("priorityClassName")
    topology = _topology_name(template)
    if priority:
        spec["priorityClassName"] = priority
    out.owner(SCHEDULER_V1, PODGANG_KIND, gang.name, out.ref(), {**labels, COMPONENT: "podgang"}, spec)
    constrained = gang.constraint or gang.groups or any("topologyConstraint" in p for p in gang.podgroups)
    if topology and constrained:
        out.owners[-1]["metadata"]["annotations"] = {TOPOLOGY_NAME: topology}


def synthesize_podcliqueset(out: Synthesis) -> None:
    replicas = count(out.spec, "replicas", 0, out.obj, "spec", out.errors)  # Grove's default is 0
    template = mapping_at(out.spec, "template", out.obj, "spec", out.errors)
    cliques = _cliques(out, template)
    pcs_pack = _domain_pack(template.get("topologyConstraint"))
    sgs = list_at(template, "podCliqueScalingGroups", out.obj, "spec.template", out.errors)
    in_group = {str(c) for sg in sgs if isinstance(sg, Mapping) for c in (sg.get("cliqueNames") or [])}
    base_labels = {**MANAGED_BY, PART_OF: out.name}
    for r in range(replicas):
        replica = {PCS_REPLICA: str(r)}
        base = _Gang(f"{out.name}-{r}", pcs_pack)
        scaled: list[_Gang] = []
        for name, c in cliques.items():
            if name not in in_group:
                labels = {**replica, COMPONENT: "pcs-podclique"}
                _make_clique(out, c, f"{out.name}-{r}-{name}", out.ref(), labels, base)
        for _, at, sg, sg_name in out.named(sgs, "name", "spec.template.podCliqueScalingGroups"):
            sg_replicas = count(sg, "replicas", 1, out.obj, at, out.errors)
            sg_min = count(sg, "minAvailable", 1, out.obj, at, out.errors)
            pcsg = f"{out.name}-{r}-{sg_name}"
            sg_spec = {"replicas": sg_replicas, "minAvailable": sg_min, "cliqueNames": sg.get("cliqueNames") or []}
            pcsg_labels = {**base_labels, **replica, COMPONENT: "pcs-podcliquescalinggroup"}
            pcsg_ref = out.owner(GROVE_V1, "PodCliqueScalingGroup", pcsg, out.ref(), pcsg_labels, sg_spec)
            sg_pack = _domain_pack(sg.get("topologyConstraint"))
            for j in range(sg_replicas):
                gang = base if j < sg_min else _Gang(f"{pcsg}-{j - sg_min}", sg_pack or pcs_pack)
                if gang is not base:
                    scaled.append(gang)
                members = []
                for clique_name in sg.get("cliqueNames") or []:
                    member = cliques.get(str(clique_name))
                    if member is None:
                        why = f"names {clique_name!r}, which spec.template.cliques does not define"
                        out.errors.append(FieldError(out.obj, f"{at}.cliqueNames", why))
                        continue
                    labels = {**replica, COMPONENT: "pcsg-podclique", PCSG: pcsg, PCSG_REPLICA: str(j)}
                    if gang is not base:
                        labels[BASE_PODGANG] = base.name
                    pclq = f"{pcsg}-{j}-{member.name}"
                    _make_clique(out, member, pclq, pcsg_ref, labels, gang)
                    members.append(pclq)
                if gang is base and sg_pack is not None:
                    base.groups.append({"name": f"{pcsg}-{j}", "podGroupNames": members, "topologyConstraint": sg_pack})
        for gang in (base, *scaled):
            _podgang(out, gang, template, base_labels)


def _grove(kind: str, plural: str) -> Resource:
    return owner("grove.io", "v1alpha1", kind, plural)


KINDS = (
    WorkloadKind(
        _grove("PodCliqueSet", "podcliquesets"),
        group_podcliqueset,
        synthesize_podcliqueset,
        reads=reads,
        watch=(
            _grove("PodClique", "podcliques"),
            _grove("PodCliqueScalingGroup", "podcliquescalinggroups"),
            owner("scheduler.grove.io", "v1alpha1", PODGANG_KIND, "podgangs"),
        ),
    ),
)

# Grove's pods wait for their PodGang under this scheduling gate until Grove has listed them all.
SCHEDULING_GATE = "grove.io/podgang-pending-creation"
__all__ = ["KINDS", "SCHEDULING_GATE", "read_podgang"]
