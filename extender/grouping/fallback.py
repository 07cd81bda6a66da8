"""Rule 3 of `group_pods`: the pods of an owner no grouper claims (a Deployment's, a ReplicaSet's,
a StatefulSet's, those of a kind nobody knows).

They are plain pods unless the workload asks to be placed as one: its metadata or its pod
template carries an annotation of `names.ASKING`, or a misspelling of one (its gang is then
Invalid and says "did you mean", rather than the constraint being dropped without a word). When
topogang sees the owner's template, the owner decides for all its pods; otherwise each pod's own
annotations (its template's copy) are read.

An owner that asks is one gang of its pods, every pod required. A Deployment, ReplicaSet or
StatefulSet requires `spec.replicas` pods (default 1), so its gang waits until its controller
has made them all instead of being placed a pod at a time as they are created; another owner
requires the pods present.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from extender.grouping import names as n
from extender.grouping.grouper import GangDraft, Link, Part
from extender.grouping.values import annotations_of, count
from extender.model import annotation_keys as keys
from extender.model.errors import FieldError
from extender.model.pod import PodInfo


def _asks(annotations: Mapping[str, str]) -> bool:
    if not n.ASKING.isdisjoint(annotations):
        return True
    found, _ = keys.check(annotations)
    return any(u.meant in n.ASKING for u in found)


def _template(top: Link) -> Mapping[str, Any] | None:
    spec = top.obj.get("spec") if top.obj is not None else None
    raw = spec.get("template") if isinstance(spec, Mapping) else None
    return raw if isinstance(raw, Mapping) else None


def asking(top: Link, pods: Sequence[PodInfo]) -> list[PodInfo]:
    """The PODS of TOP (the topmost owner of their chains, claimed by no grouper) that are gang
    members: all of them when TOP asks, none when its template is seen and does not, else those
    whose own annotations ask."""
    if top.obj is not None and _asks(annotations_of(top.obj)):
        return list(pods)
    template = _template(top)
    if template is not None:
        return list(pods) if _asks(annotations_of(template)) else []
    return [p for p in pods if _asks(p.annotations)]


def fallback(top: Link, pods: Sequence[PodInfo]) -> GangDraft:
    """One gang of the pods of TOP that ask to be one: every pod required, at least spec.replicas
    of them for the owners of `names.REPLICATED_OWNERS`."""
    first = pods[0]
    errors: list[FieldError] = []
    required = len(pods)
    if top.obj is not None and top.gvk in n.REPLICATED_OWNERS:
        spec = top.obj.get("spec")
        required = count(spec if isinstance(spec, Mapping) else {}, "replicas", 1, top.label, "spec", errors)
    size = max(len(pods), required)  # a rollout's surge, pods leaving after a scale-down
    name = top.ref.kind.lower()
    template = _template(top)
    if template is not None:
        part = Part(name, size, required, annotations_of(template), "spec.template")
    else:  # no template: the pods carry the template's annotations
        obj = f"{top.label} (read from its Pod {first.key})"
        part = Part(name, size, required, dict(first.annotations), "", obj)
    workload = annotations_of(top.obj) if top.obj is not None else {}
    draft = GangDraft(top.key(), top.label, top.label, top.ref, workload, [part], errors=errors, uid=top.ref.uid)
    draft.keys_on_pods = template is None
    return draft


__all__ = ["asking", "fallback"]
