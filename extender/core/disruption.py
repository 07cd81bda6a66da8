"""What Kubernetes' PodGroup `spec.disruptionMode` (k8s.io/api scheduling v1beta1) means here.

kube-scheduler 1.37 reads it for preemption: with `single` (the default) a pod of the group is a
victim of its own; with `all`, every pod under the highest group of the tree that says `all` goes
together or not at all. topogang already never takes part of a gang's minimum, so the modes map
onto what topogang disrupts:

single   as any gang: preemption may take pods beyond the gang's minimum one by one (the minimum
         whole); a pod lost from a running gang is replaced where the gang runs or, if it no longer
         fits there, the smallest part of the gang with a required constraint moves whole (repair);
         a gang no repair mends is kept unless `on-unrepairable: EvictGang`.
all      the gang is disrupted only as a whole: preemption takes all of it or none; no repair moves
         a part (a replacement that fits where the gang runs is still placed: that disrupts
         nothing); a gang still broken when the repair timeout passes is evicted whole, so that its
         controller starts it again together (`on-unrepairable: Keep` keeps it instead).

A group that says `all` anywhere in a tree makes the whole gang `all`: topogang moves and preempts
gangs whole or by their elastic pods, not by subtrees, so this is the one reading that never
disrupts such a group in part.
"""

from __future__ import annotations

from extender.model.podgroup import PodGroupSpec


def whole_only(spec: PodGroupSpec | None) -> bool:
    """Whether the gang of SPEC may be disrupted only as a whole (disruptionMode all)."""
    return spec is not None and spec.disruption_all


__all__ = ["whole_only"]
