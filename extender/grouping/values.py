"""Reading the values of annotations, labels and spec fields, each problem a FieldError.

A value that is malformed whatever the cluster looks like (an empty level, a size that is not a
positive integer, bad JSON) is reported here; whether a level exists is decided later against
the Topology, by `build_gang`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from extender.model import annotation_keys as keys
from extender.model.errors import FieldError
from extender.model.limits import MAX_REPLICAS, beyond
from extender.model.pod import OwnerRef, PodInfo
from extender.model.raw import json_type, literal

_LEVEL = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?$")
_UINT = re.compile(r"^[0-9]+$")


def ann_field(where: str, annotation: str) -> str:
    """The field of an annotation on the object (where="") or on a PodTemplate at `where`."""
    return f"{where}.metadata.annotations[{annotation}]" if where else f"metadata.annotations[{annotation}]"


def annotation_keys(
    ann: Mapping[str, str], obj: str, where: str, errors: list[FieldError], warnings: list[str]
) -> None:
    """A misspelt key under a prefix topogang reads is an error naming the key it misspells; one
    close to nothing, a warning (extender/model/annotation_keys.py)."""
    found, ignored = keys.problems(ann, obj, f"{where}.metadata.annotations" if where else "metadata.annotations")
    errors.extend(found)
    warnings.extend(ignored)


def label_field(label: str) -> str:
    return f"metadata.labels[{label}]"


def level(value: str | None, obj: str, field: str, errors: list[FieldError]) -> str | None:
    """A topology level as written (node label, alias or short name); None when absent."""
    if value is None:
        return None
    if not _LEVEL.match(value):
        errors.append(FieldError(obj, field, f"expected a topology level such as a node label, got {literal(value)}"))
        return None
    return value


def positive_int(value: object, obj: str, field: str, errors: list[FieldError]) -> int | None:
    """A count >= 1 written as an integer or a string of digits; None when absent."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and _UINT.match(value.strip()):
        number = int(value)
    else:
        errors.append(FieldError(obj, field, f"expected a positive integer, got {literal(value)}"))
        return None
    if number < 1:
        errors.append(FieldError(obj, field, f"expected a positive integer, got {literal(value)}"))
        return None
    return number


def count(body: Mapping[str, Any], key: str, default: int, obj: str, where: str, errors: list[FieldError]) -> int:
    """A non-negative integer spec field (replicas, parallelism...), `default` when absent.

    Above MAX_REPLICAS it is an error and `default` is returned, so nothing sized by it is built.
    """
    value = body.get(key)
    if value is None:
        return default
    field = f"{where}.{key}" if where else key
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        if value > MAX_REPLICAS:
            errors.append(FieldError(obj, field, f"is {value:,}; {beyond(MAX_REPLICAS)}"))
            return min(default, MAX_REPLICAS)
        return value
    errors.append(FieldError(obj, field, f"expected an integer >= 0, got {literal(value)}"))
    return default


def mapping_at(body: Mapping[str, Any], key: str, obj: str, where: str, errors: list[FieldError]) -> Mapping[str, Any]:
    value = body.get(key)
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return value
    errors.append(FieldError(obj, f"{where}.{key}" if where else key, f"expected an object, got {json_type(value)}"))
    return {}


def list_at(body: Mapping[str, Any], key: str, obj: str, where: str, errors: list[FieldError]) -> list[Any]:
    value = body.get(key)
    if value is None:
        return []
    if isinstance(value, list):
        return value
    errors.append(FieldError(obj, f"{where}.{key}" if where else key, f"expected a list, got {json_type(value)}"))
    return []


def annotations_of(body: Mapping[str, Any]) -> dict[str, str]:
    """metadata.annotations of a raw object or PodTemplate, values as strings (YAML may type them)."""
    meta = body.get("metadata")
    raw = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(raw, Mapping):
        return {}
    out: dict[str, str] = {}
    for k, v in raw.items():
        if isinstance(v, bool):
            out[str(k)] = str(v).lower()
        elif isinstance(v, str | int | float):
            out[str(k)] = str(v)
    return out


def controller_ref(body: Mapping[str, Any]) -> OwnerRef | None:
    """The ownerReference with controller: true of a raw object."""
    meta = body.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return OwnerRef(
                api_version=str(ref.get("apiVersion") or ""),
                kind=str(ref.get("kind") or ""),
                name=str(ref.get("name") or ""),
                uid=str(ref.get("uid") or ""),
                controller=True,
            )
    return None


def pod_index(pod: PodInfo, label: str, offset: int) -> tuple[int | None, FieldError | None]:
    """The pod's index from `label`, minus `offset`; an error when it is missing or not a number."""
    raw = pod.labels.get(label)
    obj = f"Pod {pod.key}"
    if raw is None:
        return None, FieldError(obj, label_field(label), "missing: the pod's index is needed to pick its segment")
    if not _UINT.match(raw):
        return None, FieldError(obj, label_field(label), f"expected a non-negative integer, got {raw!r}")
    value = int(raw) - offset
    if value < 0:
        why = f"{raw!r} is below the first index {offset} (the leader count is subtracted)"
        return None, FieldError(obj, label_field(label), why)
    return value, None
