"""What the admission webhook needs to know about one pod that is being created.

    admit(pod, objects, podgroups, pods) -> Admission
        gang      the gang it joins ("ns/name"), or the reason it waits for one; None: not a gang
                  pod topogang manages
        segment   its SegmentPosition when its part is segmented (KAI segment-size)

The pod is grouped by `group_pods` itself, alone, so the webhook decides exactly as the
scheduler will. A pod is *managed* when it names a PodGroup (topogang's, KAI's, or Kubernetes'
own through `spec.schedulingGroup`) or when a built-in grouper or a
ResourceInterface claims its owner (also while that owner is not visible yet: its kind is known,
so its gang will be). Pods of owners nobody knows are grouped by the scheduler all the same, but
never gated: topogang cannot know their gang's size from a spec.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from extender.grouping.group import group_pods
from extender.grouping.kinds import BUILTIN
from extender.grouping.objects import ObjectLookup
from extender.grouping.resource_interface import index_resource_interfaces
from extender.grouping.result import Grouping, SegmentPosition
from extender.grouping.upstream.objects import GROUP as UPSTREAM_GROUP
from extender.model.pod import PodInfo
from extender.model.podgroup import PodGroupSpec


@dataclass(frozen=True)
class Admission:
    managed: bool
    gang: str = ""  # the gang's key; "" while it waits
    waiting: str = ""  # why its gang cannot be resolved yet
    segment: SegmentPosition | None = None
    grouping: Grouping | None = None


def admit(
    pod: PodInfo,
    objects: ObjectLookup,
    podgroups: Mapping[str, PodGroupSpec],
    pods: Mapping[str, PodInfo] | None = None,
) -> Admission:
    """How the grouper sees POD on its own (see the module docstring); PODS: the pods its owner
    chain may pass through (a LeaderWorkerSet worker's leader)."""
    result = group_pods([pod], objects, podgroups, owner_pods=pods)
    if pod.key in result.waiting:
        return Admission(True, waiting=result.waiting[pod.key])
    key = result.pod_group.get(pod.key)
    if key is None:
        return Admission(False)
    grouping = result.groups[key]
    segment = grouping.segments.get(pod.key)
    owner = grouping.owner
    if (
        owner is not None and owner.api_version.rpartition("/")[0] != UPSTREAM_GROUP
    ):  # a tree of scheduling.k8s.io groups is managed
        known, _ = index_resource_interfaces(objects.resource_interfaces())
        if (owner.api_version, owner.kind) not in BUILTIN and (owner.api_version, owner.kind) not in known:
            return Admission(False, key, segment=segment, grouping=grouping)
    return Admission(True, key, segment=segment, grouping=grouping)


__all__ = ["Admission", "admit"]
