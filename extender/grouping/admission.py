"""What the admission webhook needs to know about one pod that is being created.

    admit(pod, objects, podgroups, pods) -> Admission
        gang      the gang it joins ("ns/name"), or the reason it waits for one; None: not a gang
                  pod topogang manages
        segment   its SegmentPosition when its part is segmented (KAI segment-size)

The pod is grouped by `group_pods` itself, alone, so the webhook decides exactly as the
scheduler will: a pod is *managed* when the grouper makes it a gang member or makes it wait for
its gang. That is, when it names a PodGroup (topogang's, KAI's, or Kubernetes' own through
`spec.schedulingGroup`), when a built-in grouper or a ResourceInterface claims its owner (also
while that owner is not visible yet: its kind is known, so its gang will be), or when an owner
nobody knows (a Deployment) asks to be a gang with an annotation (`grouping/fallback.py`). The
pods of an owner that does not ask are plain in both modes, never gated as gang members (the
webhook gates a moved pod's replacement for another reason: server/webhook.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from extender.grouping.group import group_pods
from extender.grouping.objects import ObjectLookup
from extender.grouping.result import Grouping, SegmentPosition
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
    return Admission(True, key, segment=grouping.segments.get(pod.key), grouping=grouping)


__all__ = ["Admission", "admit"]
