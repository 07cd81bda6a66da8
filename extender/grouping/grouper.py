"""The grouper contract: what a grouper reads (a `Link`, one owner in a pod's chain) and what it
answers (a `WorkloadDraft`: its gangs as `GangDraft`s of `Part`s, and a classifier that gives
each pod a `Claim`), and what `assemble` turns into a Grouping (a `GangDraft` and its
`ClaimedPod`s). Built-in groupers (`kinds`) and ResourceInterfaces both answer in these terms.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from extender.grouping.objects import ObjectLookup
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
    kueue_own: bool = False  # Kueue's placement goes to this SubGroup, not `target` (a JobSet's Job)
    # Its controller creates pod 0 (the leader) first and the others only once the leader is
    # scheduled (JobSet's exclusive placement): the gang counts those followers before they exist.
    leader_first: bool = False


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
    # The pods carry annotations of their own (no template was read): each pod's keys are checked,
    # not the parts' templates made from them (the grouper checks the group objects it read).
    keys_on_pods: bool = False
    # What Kubernetes' own gang API says of the group as a whole (its root object's fields).
    priority: int | None = None
    priority_class_name: str = ""
    disruption_all: bool = False
    never_preempts: bool = False


@dataclass(frozen=True)
class ClaimedPod:
    """A pod a grouper claimed for a gang: its part, or the error that keeps it from one."""

    pod: PodInfo
    part: str | None
    error: FieldError | None = None


@dataclass(frozen=True)
class Link:
    """One owner in a pod's controller chain; `obj` is None when topogang cannot see it."""

    ref: OwnerRef
    namespace: str
    obj: Mapping[str, Any] | None
    # Other objects a grouper may read (a Grove PodGang, named by the pod): the kind declares
    # them as `WorkloadKind.reads`, so a change to one regroups the pods that read it.
    objects: ObjectLookup | None = field(default=None, compare=False, repr=False)

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
    wait: str | None = None  # the pod waits (an object its grouper reads is not visible yet): why


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
