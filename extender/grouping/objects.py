"""What the grouper reads besides pods (`ObjectLookup`), and `ObjectIndex`, an ObjectLookup over a
list of raw objects (the simulator's input, tests)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from extender.grouping import names as n


class ObjectLookup(Protocol):
    """What the grouper may read besides pods: owner objects and ResourceInterfaces."""

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """The raw object, or None when it is not (yet) visible."""
        ...

    def resource_interfaces(self) -> Sequence[Mapping[str, Any]]:
        """Every raw ResourceInterface object (cluster-scoped)."""
        ...

    def in_namespace(self, api_version: str, kind: str, namespace: str) -> Sequence[Mapping[str, Any]]:
        """Every object of that kind in the namespace, in any version of its API group (the
        children of a scheduling.k8s.io CompositePodGroup name it; it does not name them)."""
        ...


class ObjectIndex:
    """Raw objects by (apiVersion, kind, namespace, name); ResourceInterfaces kept apart.

    ResourceInterfaces are read as `scheduling.topogang.io/v1alpha1` and, as KAI's pod-grouping design spells
    them, `kai.scheduler/v1`.
    """

    def __init__(self, objects: Iterable[Mapping[str, Any]] = (), default_namespace: str = "default") -> None:
        self.default_namespace = default_namespace
        self._by_id: dict[tuple[str, str, str | None, str], Mapping[str, Any]] = {}
        self._ris: list[Mapping[str, Any]] = []
        self._by_namespace: dict[tuple[str, str, str], dict[str, Mapping[str, Any]]] = {}
        for obj in objects:
            self.add(obj)

    def add(self, obj: Mapping[str, Any]) -> None:
        api_version, kind = str(obj.get("apiVersion") or ""), str(obj.get("kind") or "")
        if kind == n.RESOURCE_INTERFACE_KIND and api_version in n.RESOURCE_INTERFACE_APIS:
            self._ris.append(obj)
            return
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        name = str(meta.get("name") or "")
        namespace = meta.get("namespace") or self.default_namespace
        self._by_id[(api_version, kind, str(namespace), name)] = obj
        self._by_id.setdefault((api_version, kind, None, name), obj)
        self._by_namespace.setdefault((api_version.rpartition("/")[0], kind, str(namespace)), {})[name] = obj

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        return self._by_id.get((api_version, kind, namespace, name))

    def resource_interfaces(self) -> Sequence[Mapping[str, Any]]:
        return list(self._ris)

    def in_namespace(self, api_version: str, kind: str, namespace: str) -> Sequence[Mapping[str, Any]]:
        return list(self._by_namespace.get((api_version.rpartition("/")[0], kind, namespace), {}).values())
