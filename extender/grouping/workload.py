"""What a grouper sees (an owner in a pod's chain) and what it answers (a draft, or a hand-off)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from extender.grouping.draft import GangDraft
from extender.model.errors import FieldError
from extender.model.pod import OwnerRef, PodInfo


@dataclass(frozen=True)
class Link:
    """One owner in a pod's controller chain; `obj` is None when topogang cannot see it."""

    ref: OwnerRef
    namespace: str
    obj: Mapping[str, Any] | None

    @property
    def label(self) -> str:
        return f"{self.ref.kind} {self.namespace}/{self.ref.name}"

    @property
    def gvk(self) -> tuple[str, str]:
        return (self.ref.api_version, self.ref.kind)

    def key(self, suffix: str = "") -> str:
        """The key of a PodGroup derived from this owner: "<namespace>/<kind>-<name><suffix>"."""
        return f"{self.namespace}/{self.ref.kind.lower()}-{self.ref.name}{suffix}"


@dataclass(frozen=True)
class Claim:
    """A grouper's answer for one pod: its gang and part, or the error that keeps it from one."""

    gang: str
    part: str | None
    error: FieldError | None = None


# (pod, the links between the pod and this owner, direct controller first) -> a claim, or None
# when the pod is not this grouper's ("not mine": the next grouper or owner is tried).
Classifier = Callable[[PodInfo, Sequence[Link]], Claim | None]


@dataclass
class WorkloadDraft:
    """The gangs of one owner object, built once from its spec, and how its pods join them."""

    gangs: dict[str, GangDraft]
    classify: Classifier
    source: str = ""  # for gangs a claim names that the spec has not (a pod's bad group index)
    obj: str = ""
    owner: OwnerRef | None = None
    errors: list[FieldError] = field(default_factory=list)


# A grouper reads an owner object; None hands it off to the next grouper or owner.
Grouper = Callable[[Link], WorkloadDraft | None]


def single(gang: GangDraft, classify: Classifier) -> WorkloadDraft:
    return WorkloadDraft({gang.key: gang}, classify, gang.source, gang.obj, gang.owner)
