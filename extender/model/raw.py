"""Typed access to raw Kubernetes JSON (dicts from YAML or the API server).

Raw bodies stay `Mapping[str, Any]` at the boundary and are turned into frozen dataclasses at
once; these helpers keep that conversion short and make every type mismatch a FieldError.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Collection, Mapping
from typing import Any

from extender.model.errors import ErrorList

JSON = Mapping[str, Any]


def literal(value: object, limit: int = 80) -> str:
    """A value as YAML or JSON would show it, for messages: 'text', 3, null, true, {"a": 1}."""
    if isinstance(value, str):
        text = repr(value)
    else:
        try:
            text = json.dumps(value, separators=(", ", ": "))
        except (TypeError, ValueError):
            text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def json_type(value: object) -> str:
    """The JSON name of a value's type, for messages: an object, a list, a string, null..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def unknown_fields(body: JSON, known: Collection[str], where: str, errors: ErrorList) -> None:
    """Report every key of `body` that is not in `known`, as kubectl's strict validation does, so
    that a typo (`requiredTopologyLevl`) is an error instead of a constraint silently dropped."""
    for key in body:
        if key in known:
            continue
        field = f"{where}.{key}" if where else str(key)
        close = difflib.get_close_matches(str(key), list(known), n=1)
        hint = f"; did you mean {close[0]}?" if close else f" (known: {', '.join(sorted(known))})"
        errors.add(field, f"unknown field{hint}")


def mapping(obj: object, field: str, errors: ErrorList) -> JSON:
    """The value as a mapping; None counts as empty; anything else is an error."""
    if obj is None:
        return {}
    if isinstance(obj, Mapping):
        return obj
    errors.add(field, f"expected an object, got {json_type(obj)}")
    return {}


def seq(obj: object, field: str, errors: ErrorList) -> list[Any]:
    if obj is None:
        return []
    if isinstance(obj, list | tuple):
        return list(obj)
    errors.add(field, f"expected a list, got {json_type(obj)}")
    return []


def opt_str(obj: object, field: str, errors: ErrorList) -> str | None:
    if obj is None:
        return None
    if isinstance(obj, str):
        return obj
    errors.add(field, f"expected a string, got {literal(obj)}")
    return None


def opt_int(obj: object, field: str, errors: ErrorList) -> int | None:
    if obj is None:
        return None
    if isinstance(obj, int) and not isinstance(obj, bool):
        return obj
    errors.add(field, f"expected an integer, got {literal(obj)}")
    return None


def opt_bool(obj: object, field: str, errors: ErrorList) -> bool | None:
    if obj is None:
        return None
    if isinstance(obj, bool):
        return obj
    errors.add(field, f"expected true or false, got {literal(obj)}")
    return None


def str_map(obj: object, field: str, errors: ErrorList) -> dict[str, str]:
    """A map of string to string (labels, annotations, nodeSelector)."""
    out: dict[str, str] = {}
    for key, value in mapping(obj, field, errors).items():
        if isinstance(value, str):
            out[str(key)] = value
        elif isinstance(value, bool | int | float):  # YAML turns "true" and 4 into non-strings
            out[str(key)] = str(value).lower() if isinstance(value, bool) else str(value)
        else:
            errors.add(f"{field}.{key}", f"expected a string, got {literal(value)}")
    return out


def object_name(body: JSON) -> str:
    """'namespace/name' or 'name' for messages; tolerant of malformed metadata."""
    meta = body.get("metadata")
    if not isinstance(meta, Mapping):
        return "<unnamed>"
    name = meta.get("name") or meta.get("generateName") or "<unnamed>"
    ns = meta.get("namespace")
    return f"{ns}/{name}" if ns else str(name)


def identify(body: JSON, kind: str, default_namespace: str | None = None) -> tuple[JSON, str, str, ErrorList]:
    """The start of every parser: metadata, name, namespace ("" for cluster-scoped kinds, when
    `default_namespace` is None) and an ErrorList that names the object in every message."""
    raw_meta = body.get("metadata")
    meta: JSON = raw_meta if isinstance(raw_meta, Mapping) else {}
    name = meta.get("name")
    namespace = meta.get("namespace") or default_namespace or ""
    shown = f"{namespace}/{name or '<unnamed>'}" if default_namespace is not None else f"{name or '<unnamed>'}"
    errors = ErrorList(f"{kind} {shown}")
    if not isinstance(name, str) or not name:
        errors.add("metadata.name", "expected a non-empty string")
        name = ""
    if not isinstance(namespace, str):
        errors.add("metadata.namespace", "expected a string")
        namespace = default_namespace or ""
    return meta, name, namespace, errors
