"""Where the resource.k8s.io/v1 kinds land in ClusterState (for `core.apply`, shared by the live
cache and the simulator)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from extender.core.cluster import ClusterState
from extender.model.dra.claims import parse_claim_template, parse_resource_claim
from extender.model.dra.slices import parse_device_class, parse_resource_slice

DRA_API_VERSION = "resource.k8s.io/v1"
DRA_KINDS = ("ResourceSlice", "DeviceClass", "ResourceClaim", "ResourceClaimTemplate")


def _ident(body: Mapping[str, Any]) -> tuple[str, str]:
    meta = body.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


def apply_dra(state: ClusterState, api: str, kind: str, body: Mapping[str, Any]) -> bool:
    """Store a DRA object; False for any other kind. Raises InvalidObject when it cannot be used."""
    if api != DRA_API_VERSION or kind not in DRA_KINDS:
        return False
    if kind == "ResourceSlice":
        found = parse_resource_slice(body)
        state.set_dra(kind, found.name, found)
    elif kind == "DeviceClass":
        cls = parse_device_class(body)
        state.set_dra(kind, cls.name, cls)
    elif kind == "ResourceClaim":
        claim = parse_resource_claim(body)
        state.set_dra(kind, sys.intern(claim.key), claim)  # interned: the key pods' references use
    else:
        template = parse_claim_template(body)
        state.set_dra(kind, template.key, template)
    return True


def delete_dra(state: ClusterState, api: str, kind: str, body: Mapping[str, Any]) -> bool:
    """Forget a DRA object; False for any other kind."""
    if api != DRA_API_VERSION or kind not in DRA_KINDS:
        return False
    namespace, name = _ident(body)
    cluster_scoped = kind in ("ResourceSlice", "DeviceClass")
    state.set_dra(kind, name if cluster_scoped else f"{namespace}/{name}", None)
    return True
