"""The kube-scheduler extender wire types (k8s.io/kube-scheduler/extender/v1), in and out.

The Go structs carry no JSON tags, so keys are the PascalCase field names; kube-scheduler
decodes replies case-insensitively and sends empty lists as null. Requests are decoded here at
once into small frozen values (or a WireError naming the field and what was expected); replies
always carry lists and maps, never null, because a null node list means "every node failed".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

import orjson


class ExtenderArgs(TypedDict):
    Pod: dict[str, Any]
    Nodes: NotRequired[dict[str, Any] | None]  # a v1.NodeList, when nodeCacheCapable is false
    NodeNames: NotRequired[list[str] | None]  # when nodeCacheCapable is true


class ExtenderFilterResult(TypedDict):
    Nodes: dict[str, Any] | None
    NodeNames: list[str] | None
    FailedNodes: dict[str, str]
    FailedAndUnresolvableNodes: dict[str, str]
    Error: str


class HostPriority(TypedDict):
    Host: str
    Score: int


class ExtenderBindingArgs(TypedDict):
    PodName: str
    PodNamespace: str
    PodUID: str
    Node: str


class ExtenderBindingResult(TypedDict):
    Error: str


class ExtenderPreemptionResult(TypedDict):
    NodeNameToMetaVictims: dict[str, Any]


class WireError(ValueError):
    """A request body that is not what kube-scheduler sends; the message names the field."""


def _loads(body: bytes, what: str) -> dict[str, Any]:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise WireError(f"{what}: the body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise WireError(f"{what}: expected a JSON object, got {type(doc).__name__}")
    return doc


def _field(doc: Mapping[str, Any], name: str) -> Any:
    """Go's decoder matches keys case-insensitively; so do we."""
    if name in doc:
        return doc[name]
    lower = name.lower()
    return next((v for k, v in doc.items() if k.lower() == lower), None)


@dataclass(frozen=True)
class NodeArgs:
    """A decoded filter/prioritize/preempt request."""

    pod: Mapping[str, Any]
    namespace: str
    name: str
    names: list[str]
    nodes: list[Mapping[str, Any]] | None  # full Node objects, when not node-cache-capable

    @property
    def pod_key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def nominated(self) -> str | None:
        """The pod's status.nominatedNodeName as kube-scheduler saw it for this call."""
        status = self.pod.get("status")
        node = status.get("nominatedNodeName") if isinstance(status, dict) else None
        return node if isinstance(node, str) and node else None


def decode_args(body: bytes) -> NodeArgs:
    doc = _loads(body, "ExtenderArgs")
    pod = _field(doc, "Pod")
    if not isinstance(pod, dict):
        raise WireError("ExtenderArgs.Pod: expected a Pod object")
    meta = pod.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        raise WireError("ExtenderArgs.Pod.metadata.name: expected the pod's name")
    namespace = meta.get("namespace") or "default"
    names_raw = _field(doc, "NodeNames")
    nodes_raw = _field(doc, "Nodes")
    full: list[Mapping[str, Any]] | None = None
    if names_raw is not None:
        if not isinstance(names_raw, list):
            raise WireError("ExtenderArgs.NodeNames: expected a list of node names")
        try:  # every element a string, checked in C: this runs on every filter call
            "".join(names_raw)
        except TypeError:
            raise WireError("ExtenderArgs.NodeNames: expected a list of node names") from None
        names = names_raw
    elif nodes_raw is not None:
        items = nodes_raw.get("items") if isinstance(nodes_raw, dict) else None
        if not isinstance(items, list):
            raise WireError("ExtenderArgs.Nodes.items: expected a list of Node objects")
        full = []
        names = []
        for i, item in enumerate(items):
            name = item.get("metadata", {}).get("name") if isinstance(item, dict) else None
            if not isinstance(name, str):
                raise WireError(f"ExtenderArgs.Nodes.items[{i}].metadata.name: expected the node's name")
            full.append(item)
            names.append(name)
    else:
        names = []
    return NodeArgs(pod, str(namespace), meta["name"], names, full)


def encode_filter(
    args: NodeArgs,
    passing: Sequence[str],
    failed: Mapping[str, str],
    unresolvable: Mapping[str, str],
    error: str = "",
) -> bytes:
    # Only names kube-scheduler offered may come back, or it fails the whole attempt: the core
    # guarantees it (GangScheduler.filter returns a subset of the names it was given).
    keep = list(passing)
    result: ExtenderFilterResult = {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": dict(failed),
        "FailedAndUnresolvableNodes": dict(unresolvable),
        "Error": error,
    }
    if args.nodes is not None:
        wanted = set(keep)  # full Node objects: send back those that passed
        result["Nodes"] = {"items": [n for n in args.nodes if n["metadata"]["name"] in wanted]}
    else:
        result["NodeNames"] = keep
    return orjson.dumps(result)


def encode_priorities(scores: Sequence[tuple[str, int]]) -> bytes:
    out: list[HostPriority] = [{"Host": host, "Score": score} for host, score in scores]
    return orjson.dumps(out)


@dataclass(frozen=True)
class BindArgs:
    namespace: str
    name: str
    uid: str
    node: str

    @property
    def pod_key(self) -> str:
        return f"{self.namespace}/{self.name}"


def decode_binding(body: bytes) -> BindArgs:
    doc = _loads(body, "ExtenderBindingArgs")
    values = {}
    for name in ("PodName", "PodNamespace", "PodUID", "Node"):
        value = _field(doc, name)
        if not isinstance(value, str) or (not value and name != "PodUID"):
            raise WireError(f"ExtenderBindingArgs.{name}: expected a non-empty string")
        values[name] = value
    return BindArgs(values["PodNamespace"], values["PodName"], values["PodUID"], values["Node"])


def encode_binding(error: str = "") -> bytes:
    result: ExtenderBindingResult = {"Error": error}
    return orjson.dumps(result)


def decode_victims(body: bytes) -> tuple[str, dict[str, Any]]:
    """The pod key and the victims kube-scheduler proposes, as MetaVictims (UIDs only)."""
    doc = _loads(body, "ExtenderPreemptionArgs")
    pod = _field(doc, "Pod")
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        raise WireError("ExtenderPreemptionArgs.Pod.metadata.name: expected the pod's name")
    key = f"{meta.get('namespace') or 'default'}/{meta['name']}"
    meta_victims = _field(doc, "NodeNameToMetaVictims")
    if isinstance(meta_victims, dict):
        return key, meta_victims
    victims = _field(doc, "NodeNameToVictims") or {}
    if not isinstance(victims, dict):
        raise WireError("ExtenderPreemptionArgs.NodeNameToVictims: expected a map of node name to victims")
    out: dict[str, Any] = {}
    for node, raw in victims.items():
        v = raw if isinstance(raw, dict) else {}
        pods = _field(v, "Pods")
        metas = [p.get("metadata") for p in pods if isinstance(p, dict)] if isinstance(pods, list) else []
        uids = [{"UID": m.get("uid", "")} for m in metas if isinstance(m, dict)]
        out[node] = {"Pods": uids, "NumPDBViolations": _field(v, "NumPDBViolations") or 0}
    return key, out


@dataclass(frozen=True)
class PreemptArgs:
    pod_key: str
    victims: dict[str, Any]  # node -> MetaVictims, as kube-scheduler proposes them
    pod: Mapping[str, Any]  # the Pod as kube-scheduler sent it


def decode_preempt(body: bytes) -> PreemptArgs:
    key, victims = decode_victims(body)
    pod = _field(_loads(body, "ExtenderPreemptionArgs"), "Pod")
    return PreemptArgs(key, victims, pod if isinstance(pod, dict) else {})


def encode_victims(victims: Mapping[str, Any]) -> bytes:
    result: ExtenderPreemptionResult = {"NodeNameToMetaVictims": dict(victims)}
    return orjson.dumps(result)


def encode_error(message: str) -> bytes:
    """The Error field every extender result type has: a refusal, a bad request, a failure."""
    return orjson.dumps({"Error": message})
