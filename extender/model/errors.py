"""The small vocabulary of input errors: each names the object, the field and what was expected."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FieldError:
    """One thing wrong with one field of one object."""

    obj: str  # "PodGroup ml/train", "Topology default", "annotation kai.scheduler/segment-size"
    field: str  # "spec.subGroups[2].parent"
    message: str  # "names SubGroup 'decoder', which does not exist (have: decode, prefill)"

    def __str__(self) -> str:
        return f"{self.obj}: {self.field}: {self.message}"


class InvalidObject(ValueError):
    """Raised by parsers when an object cannot be used; carries every error found, not just one."""

    def __init__(self, errors: Iterable[FieldError]) -> None:
        self.errors: tuple[FieldError, ...] = tuple(errors)
        super().__init__("; ".join(str(e) for e in self.errors))


class ErrorList:
    """Collects FieldErrors for one object while it is parsed, then raises them all at once."""

    def __init__(self, obj: str) -> None:
        self.obj = obj
        self.errors: list[FieldError] = []

    def add(self, field: str, message: str) -> None:
        self.errors.append(FieldError(self.obj, field, message))

    def raise_if_any(self) -> None:
        if self.errors:
            raise InvalidObject(self.errors)


# Messages about pods name them "Pod <namespace>/<name>: ..." (FieldError.obj, warnings).
_POD = re.compile(r"Pod ([^\s/:]+/[^\s/:]+)")
NAMED = 3  # more pods than this saying the same are counted, not named


def _more(pods: list[str]) -> str:
    """ " (and 2 more pods: ml/b, ml/c)", or past NAMED only how many."""
    count = len(pods)
    said = f" (and {count} more pod{'s' if count > 1 else ''}"
    return f"{said}: {', '.join(pods)})" if count <= NAMED else f"{said})"


def said_once(errors: Iterable[FieldError]) -> tuple[FieldError, ...]:
    """Each error once, in the order first said: identical errors once, and errors that differ only
    in the pod they name (one template's typo on each of its pods) once, saying how many more pods."""
    groups: dict[tuple[str, str, str], dict[str, FieldError]] = {}
    for e in errors:
        pod = _POD.fullmatch(e.obj)
        groups.setdefault(("Pod" if pod else e.obj, e.field, e.message), {}).setdefault(e.obj, e)
    out = []
    for same in groups.values():
        first, *others = same.values()
        if others:
            first = FieldError(first.obj, first.field, first.message + _more([o.obj[4:] for o in others]))
        out.append(first)
    return tuple(out)


def said_once_text(messages: Iterable[str]) -> tuple[str, ...]:
    """The same for messages as text: "Pod ns/a: x" and "Pod ns/b: x" are said once."""
    groups: dict[str, dict[str, str]] = {}
    for m in messages:
        pod = _POD.match(m)
        if pod is not None and m.startswith(": ", pod.end()):
            groups.setdefault("Pod" + m[pod.end() :], {}).setdefault(pod.group(1), m)
        else:
            groups.setdefault(m, {}).setdefault("", m)
    out = []
    for same in groups.values():
        first, *others = same.items()
        out.append(first[1] + _more([key for key, _ in others]) if others else first[1])
    return tuple(out)
