"""NodeInfo: what the planner needs to know about one node."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from extender.model.quantity import QuantityError, parse_nonnegative
from extender.model.raw import JSON, identify, mapping, opt_bool, opt_str, seq, str_map
from extender.model.selectors import Taint, parse_taints

HOSTNAME_LABEL = "kubernetes.io/hostname"


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]  # milli-units per resource name, "pods" included
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unschedulable: bool = False

    @property
    def schedulable(self) -> bool:
        return self.ready and not self.unschedulable


def parse_node(body: JSON) -> NodeInfo:
    """Parse a v1 Node; raise InvalidObject naming the field when it cannot be used."""
    meta, name, _, errors = identify(body, "Node")
    labels = str_map(meta.get("labels"), "metadata.labels", errors)
    spec = mapping(body.get("spec"), "spec", errors)
    status = mapping(body.get("status"), "status", errors)
    allocatable: dict[str, int] = {}
    source = "allocatable" if status.get("allocatable") is not None else "capacity"
    # hand-written nodes often give only capacity
    for resource, value in mapping(status.get(source), f"status.{source}", errors).items():
        try:
            allocatable[str(resource)] = parse_nonnegative(value)
        except QuantityError as exc:
            errors.add(f"status.{source}.{resource}", str(exc))
    if source == "allocatable":  # capacity is not used then, but a negative one is still wrong
        for resource, value in mapping(status.get("capacity"), "status.capacity", errors).items():
            try:
                parse_nonnegative(value)
            except QuantityError as exc:
                errors.add(f"status.capacity.{resource}", str(exc))
    allocatable.setdefault("pods", 110_000)  # the kubelet's default maxPods
    ready = True
    conditions = seq(status.get("conditions"), "status.conditions", errors)
    for i, cond in enumerate(conditions):
        c = mapping(cond, f"status.conditions[{i}]", errors)
        if c.get("type") == "Ready":
            ready = opt_str(c.get("status"), f"status.conditions[{i}].status", errors) == "True"
    # A node written without any condition (a simulation input) counts as Ready.
    unschedulable = bool(opt_bool(spec.get("unschedulable"), "spec.unschedulable", errors))
    taints = parse_taints(spec.get("taints"), "spec.taints", errors)
    errors.raise_if_any()
    return NodeInfo(name, labels, allocatable, taints, ready, unschedulable)
