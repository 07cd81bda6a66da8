"""Device resources: the names under which devices of one class and selectors are counted."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

DEVICE_PREFIX = "devices/"


def device_key(class_name: str, selectors: Sequence[str] = ()) -> str:
    """`devices/gpu.example.com`, or `devices/gpu.example.com#1a2b3c4d` for a request with
    selectors of its own (the digest of its expressions: alike requests share a resource)."""
    if not selectors:
        return f"{DEVICE_PREFIX}{class_name}"
    digest = hashlib.sha256("\x00".join(selectors).encode()).hexdigest()[:8]
    return f"{DEVICE_PREFIX}{class_name}#{digest}"


def is_device_resource(resource: str) -> bool:
    return resource.startswith(DEVICE_PREFIX)
