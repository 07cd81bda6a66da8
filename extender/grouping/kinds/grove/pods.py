"""What Grove's operator creates for a PodCliqueSet, synthesized for the simulator (see the package
docstring): PodCliques, PodCliqueScalingGroups, PodGangs and pods, with Grove's names and labels."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.grouping.kinds.grove.names import (
    BASE_PODGANG,
    COMPONENT,
    GROVE_V1,
    HOSTNAME,
    MANAGED_BY,
    PART_OF,
    PCS_REPLICA,
    PCSG,
    PCSG_REPLICA,
    POD_INDEX,
    PODCLIQUE,
    PODGANG,
    PODGANG_KIND,
    SCHEDULER_V1,
    TOPOLOGY_NAME,
)
from extender.grouping.synthesis import JSON, Synthesis
from extender.grouping.values import count, list_at, mapping_at
from extender.model.errors import FieldError
from extender.model.raw import literal


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


@dataclass(frozen=True)
class _ScalingGroup:
    name: str
    replicas: int
    minimum: int
    cliques: tuple[_Clique, ...]
    pack: JSON | None


def _scaling_groups(out: Synthesis, template: Mapping[str, Any], cliques: dict[str, _Clique]) -> list[_ScalingGroup]:
    """spec.template.podCliqueScalingGroups, checked as Grove's admission checks them."""
    raws = list_at(template, "podCliqueScalingGroups", out.obj, "spec.template", out.errors)
    groups = []
    for _, at, sg, name in out.named(raws, "name", "spec.template.podCliqueScalingGroups"):
        replicas = count(sg, "replicas", 1, out.obj, at, out.errors)
        minimum = count(sg, "minAvailable", 1, out.obj, at, out.errors)
        if minimum > replicas:
            out.errors.append(FieldError(out.obj, f"{at}.minAvailable", f"is {minimum}, more than replicas {replicas}"))
        names = sg.get("cliqueNames")
        if not isinstance(names, list) or not names:
            out.errors.append(FieldError(out.obj, f"{at}.cliqueNames", f"expected clique names, got {literal(names)}"))
            continue
        unknown = [str(c) for c in names if str(c) not in cliques]
        if unknown:
            why = f"names {', '.join(unknown)}, which spec.template.cliques does not define"
            out.errors.append(FieldError(out.obj, f"{at}.cliqueNames", why))
            continue
        members = tuple(cliques[str(c)] for c in names)
        groups.append(_ScalingGroup(name, replicas, minimum, members, _domain_pack(sg.get("topologyConstraint"))))
    return groups


def synthesize_podcliqueset(out: Synthesis) -> None:
    replicas = count(out.spec, "replicas", 0, out.obj, "spec", out.errors)  # Grove's default is 0
    template = mapping_at(out.spec, "template", out.obj, "spec", out.errors)
    cliques = _cliques(out, template)
    pcs_pack = _domain_pack(template.get("topologyConstraint"))
    groups = _scaling_groups(out, template, cliques)
    if out.errors:
        return
    in_group = {c.name for sg in groups for c in sg.cliques}
    base_labels = {**MANAGED_BY, PART_OF: out.name}
    for r in range(replicas):
        replica = {PCS_REPLICA: str(r)}
        base = _Gang(f"{out.name}-{r}", pcs_pack)
        scaled: list[_Gang] = []
        for name, c in cliques.items():
            if name not in in_group:
                labels = {**replica, COMPONENT: "pcs-podclique"}
                _make_clique(out, c, f"{out.name}-{r}-{name}", out.ref(), labels, base)
        for sg in groups:
            pcsg = f"{out.name}-{r}-{sg.name}"
            sg_spec = {"replicas": sg.replicas, "minAvailable": sg.minimum, "cliqueNames": [c.name for c in sg.cliques]}
            pcsg_labels = {**base_labels, **replica, COMPONENT: "pcs-podcliquescalinggroup"}
            pcsg_ref = out.owner(GROVE_V1, "PodCliqueScalingGroup", pcsg, out.ref(), pcsg_labels, sg_spec)
            for j in range(sg.replicas):
                # replicas below minAvailable are in the base PodGang; each one beyond is its own
                gang = base if j < sg.minimum else _Gang(f"{pcsg}-{j - sg.minimum}", sg.pack or pcs_pack)
                if gang is not base:
                    scaled.append(gang)
                labels = {**replica, COMPONENT: "pcsg-podclique", PCSG: pcsg, PCSG_REPLICA: str(j)}
                if gang is not base:
                    labels[BASE_PODGANG] = base.name
                members = [f"{pcsg}-{j}-{c.name}" for c in sg.cliques]
                for c, pclq in zip(sg.cliques, members, strict=True):
                    _make_clique(out, c, pclq, pcsg_ref, labels, gang)
                if gang is base and sg.pack is not None:
                    base.groups.append({"name": f"{pcsg}-{j}", "podGroupNames": members, "topologyConstraint": sg.pack})
        for gang in (base, *scaled):
            _podgang(out, gang, template, base_labels)
