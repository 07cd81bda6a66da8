"""A PodGroupSpec back to the `spec` of a PodGroup object: the inverse of `parse_podgroup`.

topogang writes the PodGroups it derives from workloads (TFJob, Job, LeaderWorkerSet, ...) to
the API server, so `kubectl get podgroups` shows the gang the grouper decided. Only what the
PodGroup API can say is written: LeaderWorkerSet's exclusive topology and which SubGroups are a
workload's segments (placed whole beyond the minimum) are the grouper's own additions and stay in
memory (the workload's annotations are the source of truth).
"""

from __future__ import annotations

from typing import Any

from extender.model.podgroup import PodGroupSpec, TopologyConstraint


def constraint_body(c: TopologyConstraint) -> dict[str, str]:
    out = {}
    if c.required:
        out["requiredTopologyLevel"] = c.required
    if c.preferred:
        out["preferredTopologyLevel"] = c.preferred
    if c.topology:
        out["topology"] = c.topology
    return out


def podgroup_spec_body(spec: PodGroupSpec) -> dict[str, Any]:
    """The `spec` of a PodGroup object (scheduling.topogang.io/v1alpha1) that parses back to SPEC."""
    out: dict[str, Any] = {}
    if spec.min_member is not None:
        out["minMember"] = spec.min_member
    if spec.min_subgroup is not None:
        out["minSubGroup"] = spec.min_subgroup
    if spec.queue:
        out["queue"] = spec.queue
    if spec.priority_class_name:
        out["priorityClassName"] = spec.priority_class_name
    if spec.mark_unschedulable is not None:
        out["markUnschedulable"] = spec.mark_unschedulable
    if spec.scheduling_backoff is not None:
        out["schedulingBackoff"] = spec.scheduling_backoff
    if spec.subgroups:
        subgroups = []
        for sg in spec.subgroups:
            item: dict[str, Any] = {"name": sg.name}
            if sg.parent is not None:
                item["parent"] = sg.parent
            if sg.min_member is not None:
                item["minMember"] = sg.min_member
            if sg.min_subgroup is not None:
                item["minSubGroup"] = sg.min_subgroup
            subgroups.append(item)
        out["subGroups"] = subgroups
    constraints: dict[str, Any] = {}
    if spec.global_constraint is not None and not spec.global_constraint.empty:
        constraints["global"] = constraint_body(spec.global_constraint)
    by_subgroup = {name: constraint_body(c) for name, c in spec.subgroup_constraints.items() if not c.empty}
    if by_subgroup:
        constraints["subGroups"] = by_subgroup
    if spec.subgroup_sets:
        constraints["subGroupSets"] = [
            {"subGroups": list(s.subgroups), "constraint": constraint_body(s.constraint)} for s in spec.subgroup_sets
        ]
    if constraints:
        out["topologyConstraints"] = constraints
    return out
