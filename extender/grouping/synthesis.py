"""Synthesis: the pods (and intermediate owners) being made for one workload, and the helpers
every kind's synthesizer shares. What each kind makes is in its module under `kinds`;
`synthesize` dispatches to it.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from extender.grouping.objects import ObjectLookup
from extender.model.errors import FieldError
from extender.model.limits import MAX_WORKLOAD_PODS, beyond

JSON = dict[str, Any]


class TooManyPods(Exception):
    """The workload would have more pods than MAX_WORKLOAD_PODS (the error is in `Synthesis.errors`)."""


# An object read besides the workload, as (apiVersion, kind, namespace or None, name).
ObjectRef = tuple[str, str, str | None, str]


@dataclass(frozen=True)
class Synthesized:
    pods: tuple[JSON, ...]
    owners: tuple[JSON, ...]  # intermediate owner objects (Jobs, StatefulSets, RayClusters)
    read: tuple[ObjectRef, ...] = ()  # the other objects the synthesis read (a TrainJob's runtime)


def uid_for(kind: str, namespace: str, name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"topogang/{kind}/{namespace}/{name}"))


class Synthesis:
    """One workload being synthesized: what was read of it, and the pods, owners and errors made."""

    def __init__(
        self, workload: Mapping[str, Any], default_namespace: str, objects: ObjectLookup | None = None
    ) -> None:
        meta = workload.get("metadata")
        self.meta: Mapping[str, Any] = meta if isinstance(meta, Mapping) else {}
        self.api_version = str(workload.get("apiVersion") or "")
        self.kind = str(workload.get("kind") or "")
        self.name = str(self.meta.get("name") or "")
        self.namespace = str(self.meta.get("namespace") or default_namespace)
        self.uid = str(self.meta.get("uid") or uid_for(self.kind, self.namespace, self.name))
        self.obj = f"{self.kind} {self.namespace}/{self.name or '<unnamed>'}"
        self.errors: list[FieldError] = []
        self.pods: list[JSON] = []
        self.owners: list[JSON] = []
        self.expected = 0  # pods announced so far, checked before they are made
        # The other objects of the input a kind's synthesis may read (a TrainJob's runtime), and
        # those it read.
        self.objects = objects
        self.read: list[ObjectRef] = []
        spec = workload.get("spec")
        self.spec: Mapping[str, Any] = spec if isinstance(spec, Mapping) else {}
        if not self.name:
            self.errors.append(FieldError(self.obj, "metadata.name", "expected a non-empty string"))
        if not isinstance(spec, Mapping):
            self.errors.append(FieldError(self.obj, "spec", "expected an object"))

    def expect(self, pods: int, field: str) -> None:
        """Count `pods` more before making them; past MAX_WORKLOAD_PODS, stop with an error."""
        self.expected += pods
        if self.expected > MAX_WORKLOAD_PODS:
            why = f"would make {self.expected:,} pods or more; {beyond(MAX_WORKLOAD_PODS)}"
            self.errors.append(FieldError(self.obj, field, why))
            raise TooManyPods

    def named(
        self, items: Sequence[Any], key: str, where: str, obj: str | None = None
    ) -> Iterator[tuple[int, str, Mapping[str, Any], str]]:
        """The items of a list that carry a non-empty `key` as (position, field path, item, name);
        an item without one is reported (as a field of OBJ, default the workload) and skipped."""
        for i, raw in enumerate(items):
            at = f"{where}[{i}]"
            item: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
            name = str(item.get(key) or "")
            if not name:
                self.errors.append(FieldError(obj or self.obj, f"{at}.{key}", "expected a non-empty name"))
                continue
            yield i, at, item, name

    def ref(self) -> JSON:
        return owner_ref(self.api_version, self.kind, self.name, self.uid)

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """Another object of the input (None: not given), remembered as read."""
        self.read.append((api_version, kind, namespace, name))
        return self.objects.get(api_version, kind, namespace, name) if self.objects is not None else None

    def owner(
        self,
        api_version: str,
        kind: str,
        name: str,
        owner: JSON,
        labels: Mapping[str, str],
        spec: Any,
        annotations: Mapping[str, str] | None = None,
    ) -> JSON:
        """Add an intermediate owner object; return its ownerReference for its children."""
        uid = uid_for(kind, self.namespace, name)
        body: JSON = {
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "uid": uid,
                "labels": dict(labels),
                "ownerReferences": [owner],
            },
            "spec": copy.deepcopy(spec),
        }
        if annotations:
            body["metadata"]["annotations"] = dict(annotations)
        self.owners.append(body)
        return owner_ref(api_version, kind, name, uid)

    def pod(
        self,
        name: str,
        template: Mapping[str, Any],
        owner: JSON,
        labels: Mapping[str, str],
        annotations: Mapping[str, str] | None = None,
    ) -> JSON:
        meta = template.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        spec = template.get("spec")
        body: JSON = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "uid": uid_for("Pod", self.namespace, name),
                "labels": {**_strs(meta.get("labels")), **labels},
                "annotations": {**_strs(meta.get("annotations")), **(annotations or {})},
                "ownerReferences": [owner],
            },
            "spec": copy.deepcopy(dict(spec)) if isinstance(spec, Mapping) else {"containers": []},
            "status": {"phase": "Pending"},
        }
        self.pods.append(body)
        return body


def owner_ref(api_version: str, kind: str, name: str, uid: str) -> JSON:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _strs(raw: Any) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in raw.items() if v is not None}
