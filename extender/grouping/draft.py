"""What a grouper hands to `tree.assemble`: a gang's parts (replica types) and its claimed pods."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from extender.model.errors import FieldError
from extender.model.pod import OwnerRef, PodInfo
from extender.model.podgroup import SubGroupSpec, TopologyConstraint


@dataclass(frozen=True)
class Part:
    """One replica type of a workload, read from its spec."""

    name: str  # the SubGroup name
    replicas: int
    minimum: int
    template: Mapping[str, str] = field(default_factory=dict)  # the PodTemplate's annotations
    where: str = ""  # the PodTemplate's field path ("" when the annotations come from a pod)
    template_obj: str | None = None  # whose field `where` is (default: the workload)
    index_label: str | None = None  # the kind's default index label
    index_offset: int = 0  # subtracted from the default index label (LWS leaders)
    parent: str | None = None
    target: str | None = None  # the SubGroup the template's own placement goes to (default: this one)
    slice_default: int | None = None  # Kueue podset-slice-size when not written (JobSet: parallelism)


@dataclass
class GangDraft:
    """One PodGroup as a grouper sees it before pods join."""

    key: str
    source: str
    obj: str  # FieldError.obj for the workload's own fields: "TFJob ml/train"
    owner: OwnerRef | None
    annotations: Mapping[str, str] = field(default_factory=dict)  # the workload's own annotations
    parts: list[Part] = field(default_factory=list)
    parents: list[SubGroupSpec] = field(default_factory=list)  # SubGroups above parts (JobSet)
    constraints: dict[str, TopologyConstraint] = field(default_factory=dict)  # set by the grouper
    global_constraint: TopologyConstraint | None = None  # set by the grouper (LWS exclusive)
    root_min: int | None = None  # default: every top-level SubGroup
    errors: list[FieldError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    uid: str = ""


@dataclass(frozen=True)
class Member:
    """A pod a grouper claimed for a gang: its part, or the error that keeps it from one."""

    pod: PodInfo
    part: str | None
    error: FieldError | None = None
