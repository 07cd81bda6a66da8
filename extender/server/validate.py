"""Names in a request checked as the API server would: a pod name or namespace Kubernetes would
not accept cannot be a pod it sent, so the call is a 400 naming the field, never a lookup.

Pod and node names are DNS-1123 subdomains (at most 253 characters: lower-case letters, digits,
'-' and '.', starting and ending with a letter or digit); namespaces are DNS-1123 labels (at most
63 characters, no '.'), as k8s.io/apimachinery's validation says.
"""

from __future__ import annotations

import re

from extender.server.wire import WireError

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_MAX, SUBDOMAIN_MAX = 63, 253


def dns1123_label(field: str, value: str) -> None:
    if len(value) > LABEL_MAX or not _LABEL.fullmatch(value):
        raise WireError(
            f"{field}: {value[:80]!r} is not a valid namespace: expected a DNS-1123 label "
            f"(at most {LABEL_MAX} lower-case letters, digits and '-', starting and ending with a letter or digit)"
        )


def dns1123_subdomain(field: str, value: str, what: str) -> None:
    if len(value) > SUBDOMAIN_MAX or not _SUBDOMAIN.fullmatch(value):
        raise WireError(
            f"{field}: {value[:80]!r} is not a valid {what} name: expected a DNS-1123 subdomain "
            f"(at most {SUBDOMAIN_MAX} lower-case letters, digits, '-' and '.', starting and ending with a "
            "letter or digit)"
        )


def pod(prefix: str, namespace: str, name: str) -> None:
    """PREFIX names where the pod's namespace and name were read (for the error)."""
    dns1123_label(f"{prefix}namespace", namespace)
    dns1123_subdomain(f"{prefix}name", name, "pod")
