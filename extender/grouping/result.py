"""What `group_pods` returns: a `Grouping` per gang, and where each pod went."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from extender.model.errors import FieldError
from extender.model.pod import OwnerRef
from extender.model.podgroup import PodGroupSpec


@dataclass(frozen=True)
class SegmentPosition:
    """Where a pod of a segmented part sits: its segment (outermost layer), that segment's size
    and the pod's index inside it, all from the pod's index label as it picked its SubGroup."""

    segment: int
    size: int
    index_in_segment: int


@dataclass(frozen=True)
class LeaderFirst:
    """A part whose pods its controller creates around a leader: pod index 0 first, the others
    (the followers) only once the leader is scheduled. JobSet's exclusive placement does this: its
    pod webhook refuses a Job's followers until the Job's leader has a node. Planned as a gang that
    waits for every pod, such a part would wait forever; so once its leader is present the gang
    counts its followers that are not created yet (core/membership.py, grouping/expected.py)."""

    index_label: str  # the label that carries a pod's index (a Job's completion index)
    leaves: tuple[str, ...]  # the leaf SubGroup of pod index i, for each index of the part's minimum


@dataclass(frozen=True)
class Grouping:
    """One gang: a derived or explicit PodGroup and how its pods join it."""

    key: str  # "namespace/name" of the PodGroup
    podgroup: PodGroupSpec | None  # None when the group is Invalid (see errors)
    subgroup_of: Mapping[str, str] = field(default_factory=dict)  # pod key -> leaf SubGroup (derived groups)
    order: Mapping[str, int] = field(default_factory=dict)  # pod key -> pod index, where the kind has one
    segments: Mapping[str, SegmentPosition] = field(default_factory=dict)  # pod key -> its segment, if segmented
    owner: OwnerRef | None = None  # the workload; None for explicit PodGroups
    errors: tuple[FieldError, ...] = ()  # non-empty: Invalid, no pod of it is placed
    warnings: tuple[str, ...] = ()  # annotations ignored and why: for the group's message and the log
    source: str = ""  # "TFJob ml/train", "RayCluster ml/rc via ResourceInterface raycluster", "PodGroup ml/pg"
    leader_first: Mapping[str, LeaderFirst] = field(default_factory=dict)  # part name -> its rule

    @property
    def valid(self) -> bool:
        return self.podgroup is not None and not self.errors


@dataclass(frozen=True)
class GroupingResult:
    groups: Mapping[str, Grouping]  # by key
    pod_group: Mapping[str, str]  # pod key -> group key, for every pod that belongs to a group
    waiting: Mapping[str, str]  # pod key -> why its group cannot be resolved yet
    # Pods in none of these are plain pods, scheduled like any pod.
    warnings: tuple[str, ...] = ()  # not about one group: ResourceInterfaces that target nothing

    def pods_of(self, key: str) -> list[str]:
        return sorted(p for p, g in self.pod_group.items() if g == key)
