"""DeviceInventory: the ResourceSlices, DeviceClasses, ResourceClaims and templates topogang
knows, and the per-node arrays planning reads from them.

- `capacity(resource, nodes)`: per node, the devices a device resource selects (milli-units, as
  every quantity in topogang), or for a DeviceClass's `extendedResourceName` (KEP-5004) the
  node's own allocatable where a device plugin gives it, else its devices of that class, as
  kube-scheduler counts it. None for any other resource.
- `allocated(resource, index)`: per node, the devices of that resource that claims hold
  (`status.allocation`), each device once however many claims share it.

A node's devices are those of the slices for it (`nodeName`), and of the slices that reach it
through `nodeSelector` or `allNodes` (counted on every node they reach; see the limits in docs/workloads.md).
Only a pool's newest generation counts, as in kube-scheduler. Devices are grouped by what a
selector can see of them, so selectors are evaluated once per kind of device, not per device.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from extender.core.dra.keys import DEVICE_PREFIX, device_key, is_device_resource
from extender.model.dra.claims import ClaimInfo, ClaimSpec, TemplateInfo
from extender.model.dra.expressions import Invalid, Unsupported, Verdict, all_match
from extender.model.dra.slices import Device, DeviceClassInfo, DeviceId, DeviceSlice, Where
from extender.model.node import NodeInfo
from extender.placement import IntArray

_SPECS_KEPT = 10_000
DraObject = DeviceSlice | DeviceClassInfo | ClaimInfo | TemplateInfo
DEVICES, CLAIMS = "devices", "claims"  # what a change to one object changed (`DeviceInventory.set`)


@dataclass(frozen=True)
class Selection:
    """What one device resource selects: a class and the request's own selectors."""

    class_name: str
    selectors: tuple[str, ...]


@dataclass
class _Devices:
    """The devices of one node list, as the slices hold them: per pool, groups of devices (a
    slice's own tuple, or one device with its own node selection) and the node indices each
    group is counted on. Nothing per device is added (memory: 160,000 devices)."""

    nodes: tuple[str, ...]
    pools: dict[tuple[str, str], list[tuple[tuple[Device, ...], tuple[int, ...]]]]

    def all(self) -> Iterator[tuple[Device, tuple[int, ...]]]:
        for groups in self.pools.values():
            for devices, on in groups:
                for device in devices:
                    yield device, on

    def get(self, device: DeviceId) -> tuple[Device, tuple[int, ...]] | None:
        for devices, on in self.pools.get(device[:2], ()):
            for found in devices:
                if found.name == device[2]:
                    return found, on
        return None


class DeviceInventory:
    def __init__(self) -> None:
        self.slices: dict[str, DeviceSlice] = {}
        self.classes: dict[str, DeviceClassInfo] = {}
        self.claims: dict[str, ClaimInfo] = {}
        self.templates: dict[str, TemplateInfo] = {}
        self.selections: dict[str, Selection] = {}
        self.version = 0  # bumps when slices or classes change (capacity may change)
        self.claims_version = 0  # bumps when a claim changes (allocations may change)
        self._devices: _Devices | None = None
        self._verdicts: dict[str, Verdict] = {}  # device resource -> True, or why it cannot be counted
        self._capacity: dict[str, IntArray] = {}
        self._allocated: dict[tuple[str, int], IntArray] = {}
        self._specs: dict[ClaimSpec, ClaimSpec] = {}

    # -- changes ------------------------------------------------------------------------------------

    def set(self, kind: str, key: str, found: DraObject | None) -> str | None:
        """Store or forget one object; DEVICES when capacity per node may have changed, CLAIMS
        when what claims ask or hold did, None when nothing did."""
        if kind == "ResourceSlice":
            assert found is None or isinstance(found, DeviceSlice)
            self.set_slice(key, found)
            return DEVICES
        if kind == "DeviceClass":
            assert found is None or isinstance(found, DeviceClassInfo)
            self.set_class(key, found)
            return DEVICES
        if kind == "ResourceClaim":
            assert found is None or isinstance(found, ClaimInfo)
            return CLAIMS if self.set_claim(key, found) != found else None
        assert found is None or isinstance(found, TemplateInfo)
        if self.templates.get(key) == found:
            return None
        self.set_template(key, found)
        return CLAIMS

    def set_slice(self, name: str, found: DeviceSlice | None) -> None:
        if found is None:
            self.slices.pop(name, None)
        else:
            self.slices[name] = found
        self._devices_changed()

    def set_class(self, name: str, found: DeviceClassInfo | None) -> None:
        if found is None:
            self.classes.pop(name, None)
        else:
            self.classes[name] = found
        self._devices_changed()

    def _devices_changed(self) -> None:
        self.version += 1
        self._devices = None
        self._verdicts.clear()
        self._capacity.clear()
        self._allocated.clear()

    def set_claim(self, key: str, claim: ClaimInfo | None) -> ClaimInfo | None:
        old = self.claims.pop(key, None)
        if claim is not None:
            # Claims made from one template ask alike: one spec for all (bounded; memory)
            spec = self._specs.get(claim.spec)
            if spec is None and len(self._specs) < _SPECS_KEPT:
                spec = self._specs[claim.spec] = claim.spec
            self.claims[key] = claim if spec is None else replace(claim, spec=spec)
        if (old and old.allocated) or (claim and claim.allocated):
            self.claims_version += 1
            self._allocated.clear()
        return old

    def set_template(self, key: str, template: TemplateInfo | None) -> None:
        if template is None:
            self.templates.pop(key, None)
        else:
            self.templates[key] = template

    @property
    def extended(self) -> dict[str, str]:
        """extendedResourceName -> the DeviceClass that backs it."""
        return {c.extended_resource_name: c.name for c in self.classes.values() if c.extended_resource_name}

    # -- devices per node -------------------------------------------------------------------------

    def _current_slices(self) -> list[DeviceSlice]:
        newest: dict[tuple[str, str], int] = {}
        for s in self.slices.values():
            newest[(s.driver, s.pool)] = max(newest.get((s.driver, s.pool), s.generation), s.generation)
        return [s for s in self.slices.values() if s.generation == newest[(s.driver, s.pool)]]

    def _devices_for(self, nodes: Sequence[NodeInfo]) -> _Devices:
        names = tuple(n.name for n in nodes)
        if self._devices is not None and self._devices.nodes == names:
            return self._devices
        index = {n: i for i, n in enumerate(names)}
        pools: dict[tuple[str, str], list[tuple[tuple[Device, ...], tuple[int, ...]]]] = {}
        for s in sorted(self._current_slices(), key=lambda s: s.name):
            groups = pools.setdefault((s.driver, s.pool), [])
            if s.devices and s.devices[0].where is None:  # the slice's nodes (perDeviceNodeSelection: each its own)
                if on := self._reach(s.where, index, nodes):
                    groups.append((s.devices, on))
                continue
            for device in s.devices:
                if device.where is not None and (on := self._reach(device.where, index, nodes)):
                    groups.append(((device,), on))
        self._devices = _Devices(names, pools)
        return self._devices

    @staticmethod
    def _reach(reach: Where, index: dict[str, int], nodes: Sequence[NodeInfo]) -> tuple[int, ...]:
        if reach.node_name is not None:
            return (index[reach.node_name],) if reach.node_name in index else ()
        return tuple(i for i, n in enumerate(nodes) if reach.reaches(n.name, n.labels))

    def verdict(self, resource: str, nodes: Sequence[NodeInfo]) -> Verdict:
        """True when the resource's selectors could be evaluated on every device; else why not."""
        if resource not in self._verdicts:
            self.capacity(resource, nodes)
        return self._verdicts.get(resource, True)

    def _selects(self, selection: Selection, device: Device) -> Verdict:
        cls = self.classes.get(selection.class_name)
        if cls is None:
            return False
        verdict = all_match(cls.selectors, device)
        return all_match(selection.selectors, device) if verdict is True else verdict

    def _selection(self, resource: str) -> Selection | None:
        """What RESOURCE selects: registered by `select`, or read from a plain class's name."""
        found = self.selections.get(resource)
        if found is None and "#" not in resource and is_device_resource(resource):
            found = Selection(resource.removeprefix(DEVICE_PREFIX), ())
        return found

    def _count(self, resource: str, nodes: Sequence[NodeInfo]) -> IntArray:
        selection = self._selection(resource)
        at: list[int] = []
        if selection is not None:
            # Devices alike share their attribute tuples (slices.py): one verdict per such group.
            seen: dict[tuple[object, ...], Verdict] = {}
            for device, on in self._devices_for(nodes).all():
                alike = (device.driver, id(device.names), id(device.values), id(device.capacity), device.multiple)
                verdict = seen.get(alike)
                if verdict is None:
                    verdict = seen[alike] = self._selects(selection, device)
                if isinstance(verdict, Invalid | Unsupported):
                    self._verdicts.setdefault(resource, verdict)
                elif verdict:
                    at.extend(on)
        self._verdicts.setdefault(resource, True)
        return np.bincount(at, minlength=len(nodes)).astype(np.int64) * 1000

    def capacity(self, resource: str, nodes: Sequence[NodeInfo]) -> IntArray | None:
        found = self._capacity.get(resource)
        if found is not None:
            return found
        if is_device_resource(resource):
            found = self._count(resource, nodes)
        elif (cls := self.extended.get(resource)) is not None:
            key = self.select(cls, ())
            devices = self._count(key, nodes)
            plugin = np.fromiter((n.allocatable.get(resource, -1) for n in nodes), np.int64, len(nodes))
            found = np.where(plugin >= 0, plugin, devices)
        else:
            return None
        found.setflags(write=False)
        self._capacity[resource] = found
        return found

    def select(self, class_name: str, selectors: tuple[str, ...]) -> str:
        """The device resource for a class and selectors (registered for capacity)."""
        key = device_key(class_name, selectors)
        self.selections.setdefault(key, Selection(class_name, selectors))
        return key

    def allocated(self, resource: str, nodes: Sequence[NodeInfo]) -> IntArray | None:
        """Devices of RESOURCE that claims hold, per node; None for other resources. For an
        extended resource the claims kube-scheduler made for it are left out: their pods'
        requests already count it."""
        cls = self.extended.get(resource) if self.classes else None  # (asked on every filter call)
        if cls is None and not is_device_resource(resource):
            return None
        cache_key = (resource, self.claims_version)
        found = self._allocated.get(cache_key)
        if found is not None:
            return found
        key = resource if cls is None else self.select(cls, ())
        selection = self._selection(key)
        devices = self._devices_for(nodes)
        held: set[DeviceId] = set()
        for claim in self.claims.values():
            if cls is not None and claim.extended_resource:
                continue
            held.update(claim.allocated)
        at: list[int] = []
        for device_id in held:
            placed = devices.get(device_id)
            if placed is not None and selection is not None and self._selects(selection, placed[0]) is True:
                at.extend(placed[1])
        out = np.bincount(at, minlength=len(nodes)).astype(np.int64) * 1000
        if cls is not None:  # nodes whose device plugin gives the resource do not use devices
            plugin = np.fromiter((resource in n.allocatable for n in nodes), np.bool_, len(nodes))
            out[plugin] = 0
        self._allocated = {cache_key: out, **{k: v for k, v in self._allocated.items() if k[1] == self.claims_version}}
        return out

    def held(self, claims: Sequence[ClaimInfo], nodes: Sequence[NodeInfo]) -> dict[str, int]:
        """What CLAIMS hold, per device resource pods ask for (and per extendedResourceName, for
        claims other than kube-scheduler's own for it): what evicting their pod gives back."""
        devices = self._devices_for(nodes)
        resources = list(self.selections.items())
        backed = [(name, Selection(cls, ())) for name, cls in self.extended.items()]
        out: dict[str, int] = {}
        for claim in claims:
            for device_id in claim.allocated:
                placed = devices.get(device_id)
                for resource, selection in resources + ([] if claim.extended_resource else backed):
                    if placed is not None and self._selects(selection, placed[0]) is True:
                        out[resource] = out.get(resource, 0) + 1000
        return out

    def most_on_a_node(self, resource: str, nodes: Sequence[NodeInfo]) -> int:
        found = self.capacity(resource, nodes)
        return int(found.max()) // 1000 if found is not None and len(found) else 0
