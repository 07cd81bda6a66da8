"""ResourceSlices and DeviceClasses: which devices exist, where, and which a class selects."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from extender.model.errors import ErrorList
from extender.model.quantity import QuantityError, parse_nonnegative
from extender.model.raw import JSON, identify, mapping, opt_bool, opt_int, opt_str, seq, unknown_fields
from extender.model.selectors import NodeSelectorTerm, parse_node_selector

AttrValue = int | bool | str | tuple[int, ...] | tuple[bool, ...] | tuple[str, ...]
DeviceId = tuple[str, str, str]  # (driver, pool, device): how an allocation names a device

_SLICE_SPEC = {
    "driver", "pool", "nodeName", "nodeSelector", "allNodes", "devices", "perDeviceNodeSelection",
    "sharedCounters", "partitionTypeAttribute", "skipNodeOperations",
}  # fmt: skip
_DEVICE = {
    "name", "attributes", "capacity", "consumesCounters", "nodeName", "nodeSelector", "allNodes", "taints",
    "bindsToNode", "bindingConditions", "bindingFailureConditions", "allowMultipleAllocations",
    "nodeAllocatableResources", "compatibilityGroups",
}  # fmt: skip
_ATTRIBUTE_KINDS = {"int", "bool", "string", "version", "ints", "bools", "strings", "versions"}
_CLASS_SPEC = {"selectors", "config", "extendedResourceName"}


@dataclass(frozen=True, slots=True)
class Where:
    """The nodes a slice's (or a device's) devices are reachable from."""

    node_name: str | None = None
    node_selector: tuple[NodeSelectorTerm, ...] = ()
    all_nodes: bool = False

    def reaches(self, node: str, labels: Mapping[str, str]) -> bool:
        if self.node_name is not None:
            return self.node_name == node
        if self.all_nodes:
            return True
        return any(t.matches(labels, node) for t in self.node_selector)

    @property
    def local(self) -> bool:
        return self.node_name is not None


@dataclass(frozen=True, slots=True)
class Device:
    name: str
    driver: str
    pool: str
    # The attributes, sorted, as their (domain, name)s (one tuple shared by devices alike) and
    # their values (a GPU's UUID makes those its own): apart, for memory.
    names: tuple[tuple[str, str], ...]
    values: tuple[AttrValue, ...]
    capacity: tuple[tuple[str, str, int], ...]  # (domain, name, milli-units), sorted
    where: Where | None = None  # perDeviceNodeSelection: the device's own node fields
    multiple: bool = False  # allowMultipleAllocations

    @property
    def attributes(self) -> tuple[tuple[str, str, AttrValue], ...]:
        """(domain, name, value) of each attribute, sorted."""
        return tuple((d, n, v) for (d, n), v in zip(self.names, self.values, strict=True))

    @property
    def id(self) -> DeviceId:
        return (self.driver, self.pool, self.name)

    @property
    def content(self) -> tuple[object, ...]:
        """What a CEL selector can see (not the name): devices alike in this evaluate alike."""
        return (self.driver, self.names, self.values, self.capacity, self.multiple)


@dataclass(frozen=True, slots=True)
class DeviceSlice:
    name: str
    driver: str
    pool: str
    generation: int
    where: Where
    devices: tuple[Device, ...]


@dataclass(frozen=True, slots=True)
class DeviceClassInfo:
    name: str
    selectors: tuple[str, ...]  # CEL expressions, all must hold
    extended_resource_name: str | None = None


def _qualified(name: str, driver: str) -> tuple[str, str]:
    domain, _, ident = name.rpartition("/")
    return (domain or driver, ident)


def _attribute(raw: object, field: str, errors: ErrorList) -> AttrValue | None:
    body = mapping(raw, field, errors)
    unknown_fields(body, _ATTRIBUTE_KINDS, field, errors)
    set_ = [k for k in _ATTRIBUTE_KINDS if body.get(k) is not None]
    if len(set_) != 1:
        errors.add(field, f"expected exactly one of {', '.join(sorted(_ATTRIBUTE_KINDS))}, got {len(set_)}")
        return None
    kind, value = set_[0], body[set_[0]]
    if kind in {"ints", "bools", "strings", "versions"}:
        return tuple(seq(value, f"{field}.{kind}", errors))
    expected = {"int": int, "bool": bool, "string": str, "version": str}[kind]
    if not isinstance(value, expected) or (kind == "int" and isinstance(value, bool)):
        errors.add(f"{field}.{kind}", f"expected a {kind}, got {value!r}")
        return None
    return value if isinstance(value, int | bool | str) else None


def _where(body: JSON, field: str, errors: ErrorList) -> Where:
    name = opt_str(body.get("nodeName"), f"{field}.nodeName", errors)
    selector = (
        parse_node_selector(body.get("nodeSelector"), f"{field}.nodeSelector", errors)
        if body.get("nodeSelector") is not None
        else ()
    )
    all_nodes = bool(opt_bool(body.get("allNodes"), f"{field}.allNodes", errors))
    return Where(name or None, selector, all_nodes)


Shared = dict[Any, Any]  # values seen already: alike devices share them (memory)
T = TypeVar("T")
_SHARED_KEPT = 65_536  # values shared across slices (a model, an index, a capacity), at most
_across: Shared = {}


def _shared(value: T, shared: Shared, across: bool = True) -> T:
    """VALUE, or an equal one of the same types seen before in this slice or, ACROSS, (bounded)
    in any slice (typed: 1 == True in Python, not in CEL). Attribute values are shared within a
    slice only: unique ones (a GPU's UUID) would fill the shared table."""
    key = (value, _types(value))
    found: T | None = shared.get(key)
    if found is None:
        found = _across.get(key) if across else None
        if found is None:
            found = value
            if across and len(_across) < _SHARED_KEPT:
                _across[key] = value
        shared[key] = found
    return found


def _types(value: object) -> object:
    return tuple(_types(v) for v in value) if isinstance(value, tuple) else type(value)


def _device(
    raw: object, field: str, driver: str, pool: str, per_device: bool, errors: ErrorList, shared: Shared
) -> Device:
    body = mapping(raw, field, errors)
    unknown_fields(body, _DEVICE, field, errors)
    name = opt_str(body.get("name"), f"{field}.name", errors) or ""
    if not name:
        errors.add(f"{field}.name", "expected a non-empty string")
    attributes = []
    for key, value in mapping(body.get("attributes"), f"{field}.attributes", errors).items():
        parsed = _attribute(value, f"{field}.attributes.{key}", errors)
        if parsed is not None:
            attributes.append((*_qualified(str(key), driver), parsed))
    capacity = []
    for key, value in mapping(body.get("capacity"), f"{field}.capacity", errors).items():
        where = f"{field}.capacity.{key}"
        cap = mapping(value, where, errors)
        try:
            capacity.append(_shared((*_qualified(str(key), driver), parse_nonnegative(cap.get("value"))), shared))
        except QuantityError as exc:
            errors.add(f"{where}.value", str(exc))
    multiple = bool(opt_bool(body.get("allowMultipleAllocations"), f"{field}.allowMultipleAllocations", errors))
    reach = _where(body, field, errors) if per_device else None
    attributes.sort(key=str)
    names = _shared(tuple(_shared((d, n), shared) for d, n, _ in attributes), shared)
    values = _shared(tuple(_shared(v, shared, across=False) for _, _, v in attributes), shared, across=False)
    caps = _shared(tuple(sorted(capacity)), shared)
    return Device(sys.intern(name), sys.intern(driver), sys.intern(pool), names, values, caps, reach, multiple)


def parse_resource_slice(body: JSON) -> DeviceSlice:
    """Parse a resource.k8s.io/v1 ResourceSlice; raise InvalidObject naming every unusable field."""
    _, name, _, errors = identify(body, "ResourceSlice")
    spec = mapping(body.get("spec"), "spec", errors)
    unknown_fields(spec, _SLICE_SPEC, "spec", errors)
    driver = opt_str(spec.get("driver"), "spec.driver", errors) or ""
    if not driver:
        errors.add("spec.driver", "expected a non-empty string")
    pool = mapping(spec.get("pool"), "spec.pool", errors)
    pool_name = opt_str(pool.get("name"), "spec.pool.name", errors) or ""
    generation = opt_int(pool.get("generation"), "spec.pool.generation", errors) or 0
    per_device = bool(opt_bool(spec.get("perDeviceNodeSelection"), "spec.perDeviceNodeSelection", errors))
    where = _where(spec, "spec", errors)
    chosen = sum((where.node_name is not None, bool(where.node_selector), where.all_nodes, per_device))
    if chosen != 1:
        errors.add("spec", f"expected one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection; got {chosen}")
    shared: Shared = {}
    devices = tuple(
        _device(d, f"spec.devices[{i}]", driver, pool_name, per_device, errors, shared)
        for i, d in enumerate(seq(spec.get("devices"), "spec.devices", errors))
    )
    errors.raise_if_any()
    return DeviceSlice(name, driver, pool_name, generation, where, devices)


def parse_device_class(body: JSON) -> DeviceClassInfo:
    """Parse a resource.k8s.io/v1 DeviceClass: its CEL selectors and its extendedResourceName."""
    _, name, _, errors = identify(body, "DeviceClass")
    spec = mapping(body.get("spec"), "spec", errors)
    unknown_fields(spec, _CLASS_SPEC, "spec", errors)
    selectors = parse_selectors(spec.get("selectors"), "spec.selectors", errors)
    extended = opt_str(spec.get("extendedResourceName"), "spec.extendedResourceName", errors)
    errors.raise_if_any()
    return DeviceClassInfo(name, selectors, extended or None)


def parse_selectors(raw: object, field: str, errors: ErrorList) -> tuple[str, ...]:
    """[{cel: {expression}}]: the expressions, every one of which a device must satisfy."""
    out = []
    for i, item in enumerate(seq(raw, field, errors)):
        body = mapping(item, f"{field}[{i}]", errors)
        unknown_fields(body, {"cel"}, f"{field}[{i}]", errors)
        cel = mapping(body.get("cel"), f"{field}[{i}].cel", errors)
        expression = opt_str(cel.get("expression"), f"{field}[{i}].cel.expression", errors)
        if not expression:
            errors.add(f"{field}[{i}].cel.expression", "expected a CEL expression")
        else:
            out.append(expression)
    return tuple(out)
