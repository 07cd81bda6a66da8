"""ResourceClaims, ResourceClaimTemplates and a pod's references to them: what devices are asked
for, and which devices an allocated claim holds."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from extender.model.dra.slices import DeviceId, parse_selectors
from extender.model.errors import ErrorList
from extender.model.raw import JSON, identify, mapping, opt_bool, opt_int, opt_str, seq, unknown_fields

EXACT_COUNT, ALL = "ExactCount", "All"
# The annotation kube-scheduler puts on the claim it makes for extended resources backed by DRA.
EXTENDED_RESOURCE_CLAIM = "resource.kubernetes.io/extended-resource-claim"

_EXACT = {"deviceClassName", "selectors", "allocationMode", "count", "adminAccess", "tolerations", "capacity",
          "derivedAttributes"}  # fmt: skip
_REQUEST = {"name", "exactly", "firstAvailable"}
_DEVICES = {"requests", "constraints", "config"}


@dataclass(frozen=True, slots=True)
class Exact:
    """One way to satisfy a request: COUNT devices (or all, mode All) of a class matching SELECTORS."""

    class_name: str
    selectors: tuple[str, ...] = ()
    mode: str = EXACT_COUNT
    count: int = 1
    admin_access: bool = False  # admin access takes no device away from others


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    name: str
    alternatives: tuple[Exact, ...]  # one for `exactly`; firstAvailable's subrequests in order


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    requests: tuple[DeviceRequest, ...]


@dataclass(frozen=True, slots=True)
class ClaimInfo:
    namespace: str
    name: str
    spec: ClaimSpec
    allocated: tuple[DeviceId, ...] = ()  # status.allocation.devices.results
    is_allocated: bool = False
    extended_resource: bool = False  # kube-scheduler's claim for a DRA-backed extended resource

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class TemplateInfo:
    namespace: str
    name: str
    spec: ClaimSpec

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One entry of a pod's spec.resourceClaims, with the claim made for it when it is known."""

    name: str
    claim_name: str | None = None  # resourceClaimName: a claim that exists on its own (maybe shared)
    template_name: str | None = None  # resourceClaimTemplateName: one claim per pod, made from it
    generated: str | None = None  # status.resourceClaimStatuses: the name of the claim made for the pod


def _exact(raw: object, field: str, errors: ErrorList, sub: bool = False) -> Exact:
    body = mapping(raw, field, errors)
    unknown_fields(body, _EXACT - {"adminAccess"} | {"name"} if sub else _EXACT, field, errors)
    class_name = opt_str(body.get("deviceClassName"), f"{field}.deviceClassName", errors) or ""
    if not class_name:
        errors.add(f"{field}.deviceClassName", "expected the name of a DeviceClass")
    mode = opt_str(body.get("allocationMode"), f"{field}.allocationMode", errors) or EXACT_COUNT
    if mode not in (EXACT_COUNT, ALL):
        errors.add(f"{field}.allocationMode", f"expected ExactCount or All, got {mode!r}")
    count = opt_int(body.get("count"), f"{field}.count", errors)
    if mode == ALL and count is not None:
        errors.add(f"{field}.count", "must not be set with allocationMode All")
    if count is not None and count < 1:
        errors.add(f"{field}.count", f"expected a count of at least 1, got {count}")
    admin = bool(opt_bool(body.get("adminAccess"), f"{field}.adminAccess", errors))
    selectors = parse_selectors(body.get("selectors"), f"{field}.selectors", errors)
    return Exact(class_name, selectors, mode, max(count or 1, 1), admin)


def parse_claim_spec(raw: object, field: str, errors: ErrorList) -> ClaimSpec:
    """A ResourceClaimSpec (a claim's spec, a template's spec.spec)."""
    devices = mapping(mapping(raw, field, errors).get("devices"), f"{field}.devices", errors)
    unknown_fields(devices, _DEVICES, f"{field}.devices", errors)
    requests = []
    for i, item in enumerate(seq(devices.get("requests"), f"{field}.devices.requests", errors)):
        where = f"{field}.devices.requests[{i}]"
        body = mapping(item, where, errors)
        unknown_fields(body, _REQUEST, where, errors)
        name = opt_str(body.get("name"), f"{where}.name", errors) or ""
        if (body.get("exactly") is None) == (body.get("firstAvailable") is None):
            errors.add(where, "expected exactly one of exactly, firstAvailable")
            continue
        if body.get("exactly") is not None:
            alternatives: tuple[Exact, ...] = (_exact(body["exactly"], f"{where}.exactly", errors),)
        else:
            subs = seq(body.get("firstAvailable"), f"{where}.firstAvailable", errors)
            at = f"{where}.firstAvailable"
            alternatives = tuple(_exact(s, f"{at}[{j}]", errors, sub=True) for j, s in enumerate(subs))
            if not alternatives:
                errors.add(f"{where}.firstAvailable", "expected at least one subrequest")
        requests.append(DeviceRequest(name, alternatives))
    return ClaimSpec(tuple(requests))


def parse_resource_claim(body: JSON, default_namespace: str = "default") -> ClaimInfo:
    """Parse a resource.k8s.io/v1 ResourceClaim: what it asks for and what it was given."""
    meta, name, namespace, errors = identify(body, "ResourceClaim", default_namespace)
    name, namespace = sys.intern(name), sys.intern(namespace)
    spec = parse_claim_spec(body.get("spec"), "spec", errors)
    status = mapping(body.get("status"), "status", errors)
    allocation = status.get("allocation")
    allocated = []
    devices = mapping(allocation, "status.allocation", errors).get("devices")
    results = mapping(devices, "status.allocation.devices", errors)
    for i, item in enumerate(seq(results.get("results"), "status.allocation.devices.results", errors)):
        where = f"status.allocation.devices.results[{i}]"
        r = mapping(item, where, errors)
        if r.get("adminAccess") is True:
            continue
        allocated.append(  # interned: the same names as the slices' (memory, with a claim per pod)
            (
                sys.intern(opt_str(r.get("driver"), f"{where}.driver", errors) or ""),
                sys.intern(opt_str(r.get("pool"), f"{where}.pool", errors) or ""),
                sys.intern(opt_str(r.get("device"), f"{where}.device", errors) or ""),
            )
        )
    annotations = mapping(meta.get("annotations"), "metadata.annotations", errors)
    errors.raise_if_any()
    return ClaimInfo(
        namespace,
        name,
        spec,
        tuple(allocated),
        allocation is not None,
        annotations.get(EXTENDED_RESOURCE_CLAIM) == "true",
    )


def parse_claim_template(body: JSON, default_namespace: str = "default") -> TemplateInfo:
    """Parse a resource.k8s.io/v1 ResourceClaimTemplate."""
    _, name, namespace, errors = identify(body, "ResourceClaimTemplate", default_namespace)
    spec = mapping(body.get("spec"), "spec", errors)
    unknown_fields(spec, {"metadata", "spec"}, "spec", errors)
    claim = parse_claim_spec(spec.get("spec"), "spec.spec", errors)
    errors.raise_if_any()
    return TemplateInfo(namespace, name, claim)


def parse_pod_claims(spec: JSON, status: JSON, errors: ErrorList) -> tuple[PodClaim, ...]:
    """A pod's spec.resourceClaims, each with the claim status.resourceClaimStatuses names for it."""
    generated: dict[str, str] = {}
    for i, item in enumerate(seq(status.get("resourceClaimStatuses"), "status.resourceClaimStatuses", errors)):
        body = mapping(item, f"status.resourceClaimStatuses[{i}]", errors)
        claim = opt_str(body.get("resourceClaimName"), f"status.resourceClaimStatuses[{i}].resourceClaimName", errors)
        if claim:
            generated[str(body.get("name", ""))] = claim
    out = []
    for i, item in enumerate(seq(spec.get("resourceClaims"), "spec.resourceClaims", errors)):
        where = f"spec.resourceClaims[{i}]"
        body = mapping(item, where, errors)
        unknown_fields(body, {"name", "resourceClaimName", "resourceClaimTemplateName"}, where, errors)
        name = opt_str(body.get("name"), f"{where}.name", errors) or ""
        claim = opt_str(body.get("resourceClaimName"), f"{where}.resourceClaimName", errors)
        template = opt_str(body.get("resourceClaimTemplateName"), f"{where}.resourceClaimTemplateName", errors)
        if bool(claim) == bool(template):
            errors.add(where, "expected exactly one of resourceClaimName, resourceClaimTemplateName")
            continue
        made = generated.get(name)  # interned: the claim's own name is the same string (memory)
        out.append(PodClaim(name, claim or None, template or None, sys.intern(made) if made else None))
    return tuple(out)
