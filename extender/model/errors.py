"""The small vocabulary of input errors: each names the object, the field and what was expected."""

from __future__ import annotations

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
