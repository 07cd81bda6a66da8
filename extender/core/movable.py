"""Which running pods defragmentation may move: those that say so, or (behind a flag) any pod
of a Deployment, ReplicaSet or StatefulSet.

A pod says so with `scheduling.topogang.io/movable: "true"` on itself (its template's copy), on
an owner up its controller chain (the ReplicaSet, the Deployment, the Job) or, for a gang
member, on its gang's PodGroup; the nearest value wins, so `"false"` on a pod keeps one replica
of a movable Deployment in place. A value other than "true" or "false" is refused: the pod is
not movable, and the error names the field.

Only pods a controller recreates are moved (a bare pod evicted would just be gone), never a
DaemonSet's (it belongs on its node), never one still terminating. Which gang members may go
(only those beyond the gang's minimum, and where), PodDisruptionBudgets, priorities and the
cooldown are the search's and the limiter's (`core/movable_members.py`, `core/defrag.py`,
`core/moves.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.core.cluster import ClusterState, object_key
from extender.model import annotation_keys as keys
from extender.model.errors import FieldError
from extender.model.pod import PodInfo
from extender.model.podgroup import PodGroupSpec

MOVABLE = keys.MOVABLE
REPLICATED = frozenset({("apps", "Deployment"), ("apps", "ReplicaSet"), ("apps", "StatefulSet")})
MAX_CHAIN = 4  # Pod -> ReplicaSet -> Deployment (-> an operator's object): enough to find a value
TRUE, FALSE = "true", "false"


@dataclass(frozen=True)
class Movability:
    movable: bool
    error: FieldError | None = None  # a value that is neither "true" nor "false"


def parse(annotations: Mapping[str, str], obj: str) -> bool | FieldError | None:
    """The object's own value: True, False, None (not written) or the error naming the field."""
    raw = annotations.get(MOVABLE)
    if raw is None:
        return None
    if raw in (TRUE, FALSE):
        return raw == TRUE
    return FieldError(obj, f"metadata.annotations[{MOVABLE}]", f'expected "true" or "false", got {raw!r}')


def movability(
    state: ClusterState, pod: PodInfo, controllers: bool, podgroup: PodGroupSpec | None = None
) -> Movability:
    """Whether POD may be moved; CONTROLLERS: every pod of a Deployment, ReplicaSet or
    StatefulSet is, unless it (or an owner) says "false". PODGROUP: the gang's, for a member
    (read after the controller chain: the farthest from the pod)."""
    ref = pod.controller
    if ref is None or ref.kind == "DaemonSet" or pod.deleting:
        return Movability(False)
    said = parse(pod.annotations, f"Pod {pod.key}")
    replicated = (ref.group, ref.kind) in REPLICATED
    up: tuple[str, str, str] | None = (ref.api_version, ref.kind, ref.name)
    for _ in range(MAX_CHAIN):
        if said is not None or up is None:
            break
        api_version, kind, name = up
        body = state.objects.get(object_key(api_version, kind, pod.namespace, name))
        if body is None:
            break
        said = parse(_annotations(body), f"{kind} {pod.namespace}/{name}")
        up = _controller(body)
        replicated = replicated or (up is not None and (up[0].rpartition("/")[0], up[1]) in REPLICATED)
    if said is None and podgroup is not None:
        said = parse(podgroup.annotations, podgroup.derived_from or f"PodGroup {podgroup.key}")
    if isinstance(said, FieldError):
        return Movability(False, said)
    if said is not None:
        return Movability(said)
    return Movability(controllers and replicated)


def _annotations(body: Mapping[str, Any]) -> Mapping[str, str]:
    meta = body.get("metadata")
    raw = meta.get("annotations") if isinstance(meta, Mapping) else None
    return {k: v for k, v in raw.items() if isinstance(v, str)} if isinstance(raw, Mapping) else {}


def _controller(body: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(apiVersion, kind, name) of the object's controller, if it has one."""
    meta = body.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            api, kind, name = ref.get("apiVersion"), ref.get("kind"), ref.get("name")
            if isinstance(api, str) and isinstance(kind, str) and isinstance(name, str):
                return api, kind, name
    return None
