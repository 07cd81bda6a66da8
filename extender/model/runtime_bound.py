"""A pod's runtime bound: how long it may run at most, which is what lets it backfill held room.

Kubernetes kills a pod past its `activeDeadlineSeconds` (the pod's own, or its Job's, which the
Job controller enforces on every pod), so either is a bound. Other kinds declare one with the
annotation `scheduling.topogang.io/runtime-bound`: a duration as Kubernetes writes them (`90m`,
`2h30m`, `45s`, `1.5h`) or a number of seconds (`3600`). topogang does not enforce the annotation;
it trusts it, as Slurm's backfill trusts a job's time limit.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from extender.model import annotation_keys as keys
from extender.model.errors import FieldError, InvalidObject
from extender.model.raw import literal

RUNTIME_BOUND_ANNOTATION = keys.RUNTIME_BOUND

_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(h|m|s)")
_EXPECTED = "a positive duration such as 90m, 2h30m or 3600 (seconds)"


def parse_duration(text: str) -> float | None:
    """Seconds in TEXT (`2h30m`, `90m`, `1.5h`, `3600`), or None when it is not such a duration."""
    text = text.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pos, seconds = 0, 0.0
        for m in _PART.finditer(text):
            if m.start() != pos:
                return None
            seconds += float(m.group(1)) * _UNITS[m.group(2)]
            pos = m.end()
        if pos != len(text):
            return None
    return seconds if math.isfinite(seconds) else None


def runtime_bound(obj: str, annotations: Mapping[str, str], active_deadline: Any = None) -> float | None:
    """The bound in seconds: the smaller of `activeDeadlineSeconds` and the annotation, None
    without either. OBJ names the object in errors ("Pod ml/w-0")."""
    bounds: list[float] = []
    if active_deadline is not None:
        if isinstance(active_deadline, bool) or not isinstance(active_deadline, int) or active_deadline <= 0:
            raise InvalidObject(
                [FieldError(obj, "spec.activeDeadlineSeconds", f"{literal(active_deadline)} is not a positive integer")]
            )
        bounds.append(float(active_deadline))
    text = annotations.get(RUNTIME_BOUND_ANNOTATION)
    if text is not None:
        seconds = parse_duration(text)
        if seconds is None or seconds <= 0:
            raise InvalidObject(
                [
                    FieldError(
                        obj,
                        f"metadata.annotations[{RUNTIME_BOUND_ANNOTATION}]",
                        f"{literal(text)}: expected {_EXPECTED}",
                    )
                ]
            )
        bounds.append(seconds)
    return min(bounds) if bounds else None
