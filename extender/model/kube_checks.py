"""What kube-scheduler checks or does for a pod that topogang's plan does not.

topogang's plan judges a pod's node by its requests, node selector, required node affinity and
tolerations, and the node's readiness and schedulability. kube-scheduler's default plugins also
bind volume claims, allocate resource claims, and check host ports, inter-pod affinity, topology
spread and inline volumes. A planned gang whose pods need none of those may be bound by topogang
ahead of kube-scheduler's bind calls (core/binding.py); one that needs any waits for each
member's own call. The API server has validated the pod, so this reads leniently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Volume sources no scheduler plugin looks at (VolumeBinding, VolumeRestrictions, VolumeZone and
# the volume limits read the others).
PLAIN_VOLUMES = frozenset({"name", "emptyDir", "configMap", "secret", "downwardAPI", "projected", "hostPath", "image"})


def _items(raw: object) -> list[Mapping[str, Any]]:
    return [x for x in raw if isinstance(x, Mapping)] if isinstance(raw, list) else []


def kube_checks(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The parts of SPEC only kube-scheduler handles, named (empty: the plan judges it all)."""
    out = []
    if any(set(v) - PLAIN_VOLUMES for v in _items(spec.get("volumes"))):
        out.append("volumes")
    containers = [*_items(spec.get("containers")), *_items(spec.get("initContainers"))]
    if any(p.get("hostPort") for c in containers for p in _items(c.get("ports"))):
        out.append("host ports")
    affinity = spec.get("affinity")
    if isinstance(affinity, Mapping) and (affinity.get("podAffinity") or affinity.get("podAntiAffinity")):
        out.append("pod affinity")
    if spec.get("topologySpreadConstraints"):
        out.append("topology spread")
    if spec.get("resourceClaims"):
        out.append("resource claims")
    return tuple(out)
