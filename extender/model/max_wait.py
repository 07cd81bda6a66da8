"""A gang's maximum wait: `scheduling.topogang.io/max-wait`, how long it may wait for room before
it is overdue (core/reservations.py: an overdue gang takes a reservation slot before any gang that
is not, and the room held for it is kept from work of any priority that is not overdue).

Written on the workload, a PodGroup, or the root of a `scheduling.k8s.io` group tree, as a
duration with units as Kubernetes writes them (`30m`, `2h`, `90s`, `1h30m`, `1.5h`). Read
strictly: a value without a unit, zero, negative or longer than a year is refused naming the
annotation, and the gang is Invalid until it is fixed, as a misspelt constraint is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from extender.model import annotation_keys as keys
from extender.model.errors import FieldError
from extender.model.raw import literal
from extender.model.runtime_bound import parse_duration

MAX_WAIT_ANNOTATION = keys.MAX_WAIT
LONGEST = 366 * 86400.0  # a year: a longer maximum is no maximum
_UNITS = re.compile(r"\s*(\d+(\.\d+)?(h|m|s))+\s*")
EXPECTED = "a positive duration with units, such as 30m, 2h, 90s or 1h30m"


def max_wait(annotations: Mapping[str, str], obj: str, where: str = "") -> tuple[float | None, FieldError | None]:
    """The maximum wait OBJ's ANNOTATIONS declare (None: none), or the error of a bad value.
    WHERE: the path before `metadata.annotations` (a template's), "" for the object's own."""
    text = annotations.get(MAX_WAIT_ANNOTATION)
    if text is None:
        return None, None
    field = (
        f"{where}.metadata.annotations[{MAX_WAIT_ANNOTATION}]"
        if where
        else f"metadata.annotations[{MAX_WAIT_ANNOTATION}]"
    )
    seconds = parse_duration(text) if _UNITS.fullmatch(text) else None
    if seconds is None or seconds <= 0:
        return None, FieldError(obj, field, f"{literal(text)}: expected {EXPECTED}")
    if seconds > LONGEST:
        return None, FieldError(obj, field, f"{literal(text)}: expected at most 8784h (a year)")
    return seconds, None
