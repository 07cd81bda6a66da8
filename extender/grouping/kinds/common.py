"""Helpers the built-in groupers share."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
    """A PodTemplate below `parent`: (raw template, its annotations, its field path)."""
    path = f"{where}.{key}" if where else key
    raw = mapping_at(parent, key, obj, where, errors)
    return raw, annotations_of(raw), path


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
