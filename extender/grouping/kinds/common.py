"""Helpers the built-in groupers share."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.grouping import names as n
from extender.grouping.grouper import GangDraft, Link, Part
from extender.grouping.values import annotations_of, mapping_at
from extender.model.errors import FieldError


def body(link: Link) -> Mapping[str, Any]:
    return link.obj or {}


def spec(link: Link, errors: list[FieldError]) -> Mapping[str, Any]:
    return mapping_at(body(link), "spec", link.label, "", errors)


def template(
    parent: Mapping[str, Any], key: str, obj: str, where: str, errors: list[FieldError]
) -> tuple[Mapping[str, Any], dict[str, str], str]:
    """A PodTemplate below `parent`: (raw template, its annotations, its field path). A template
    Kueue's Topology Aware Scheduling placed is an error (kueue_tas_refusal)."""
    path = f"{where}.{key}" if where else key
    raw = mapping_at(parent, key, obj, where, errors)
    refusal = kueue_tas_refusal(raw, obj, path)
    if refusal is not None:
        errors.append(refusal)
    return raw, annotations_of(raw), path


KUEUE_TAS_MESSAGE = (
    f"has Kueue's scheduling gate {n.KUEUE_TAS_GATE}: Kueue's Topology Aware Scheduling places these pods"
    " (the workload was admitted to a ResourceFlavor with spec.topologyName), and topogang does not decide"
    " a placement Kueue decides; admit it to a flavor without spec.topologyName (Kueue keeps the quota,"
    " topogang places), or leave its pods to kube-scheduler alone (no schedulerName topogang-scheduler)"
)


def kueue_tas_refusal(raw: Mapping[str, Any], obj: str, path: str) -> FieldError | None:
    """The one combination of Kueue and topogang that is refused: a PodTemplate that Kueue's TAS
    placed (Kueue adds its scheduling gate to the template when it starts such a workload, and
    its ungater gives each pod a nodeSelector for the domain Kueue chose)."""
    pod_spec = raw.get("spec")
    gates = pod_spec.get("schedulingGates") if isinstance(pod_spec, Mapping) else None
    if isinstance(gates, list) and any(isinstance(g, Mapping) and g.get("name") == n.KUEUE_TAS_GATE for g in gates):
        return FieldError(obj, f"{path}.spec.schedulingGates", KUEUE_TAS_MESSAGE)
    return None


def gang(
    link: Link, parts: list[Part], errors: list[FieldError], key: str | None = None, source: str = ""
) -> GangDraft:
    return GangDraft(
        key=key or link.key(),
        source=source or link.label,
        obj=link.label,
        owner=link.ref,
        annotations=annotations_of(body(link)),
        parts=parts,
        errors=errors,
        uid=link.ref.uid,
    )
