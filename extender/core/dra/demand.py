"""A pod's demand for devices: what its ResourceClaims (or the templates its claims will be made
from) ask for, as requests of device resources.

Per claim: an allocated claim asks for nothing more (its devices are counted where they were
allocated); a claim shared by several pods is counted on one of them only (`counted_here`).
Per request: `exactly` with allocationMode ExactCount asks for `count` devices, All for every
device the node has (the most any node has: exact on nodes that are alike); `firstAvailable`
takes the first subrequest that some node can satisfy, in order; adminAccess asks for nothing.
A selector topogang cannot evaluate leaves that request to kube-scheduler (a warning); a class
that does not exist, a selector that does not compile and a count no node has are errors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from extender.core.dra.inventory import DeviceInventory
from extender.model.dra.claims import ALL, ClaimInfo, ClaimSpec, DeviceRequest, Exact
from extender.model.dra.expressions import Invalid, Unsupported, check
from extender.model.errors import FieldError
from extender.model.node import NodeInfo
from extender.model.pod import PodInfo


@dataclass(frozen=True)
class DeviceDemand:
    requests: dict[str, int] = field(default_factory=dict)  # device resource -> milli-units
    errors: tuple[FieldError, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass
class _Collect:
    inventory: DeviceInventory
    nodes: Sequence[NodeInfo]
    requests: dict[str, int] = field(default_factory=dict)
    errors: list[FieldError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def request(self, obj: str, where: str, request: DeviceRequest) -> None:
        problems: list[tuple[str, str]] = []
        for j, alt in enumerate(request.alternatives):
            at = f"{where}.exactly" if len(request.alternatives) == 1 else f"{where}.firstAvailable[{j}]"
            outcome = self._alternative(obj, at, alt)
            if outcome is None:
                return
            problems.append((at, outcome))
        for at, message in problems:  # no alternative can be met: say why for each
            self.errors.append(FieldError(obj, at, message))

    def _alternative(self, obj: str, at: str, alt: Exact) -> str | None:
        """None when ALT is counted (or left to kube-scheduler); else why it cannot be met."""
        if alt.admin_access:
            return None
        cls = self.inventory.classes.get(alt.class_name)
        if cls is None:
            return f"deviceClassName: names DeviceClass {alt.class_name!r}, which does not exist"
        for expression in (*cls.selectors, *alt.selectors):
            bad = check(expression)
            if isinstance(bad, Invalid):
                return f"selector {expression!r} {bad.reason}"
        key = self.inventory.select(alt.class_name, alt.selectors)
        verdict = self.inventory.verdict(key, self.nodes)
        if isinstance(verdict, Invalid):
            return f"selector {verdict.expression!r} {verdict.reason}"
        if isinstance(verdict, Unsupported):
            self.warnings.append(
                f"{obj}: {at}: selector {verdict.expression!r} {verdict.reason}; "
                "kube-scheduler decides where these devices fit"
            )
            return None
        most = self.inventory.most_on_a_node(key, self.nodes)
        need = most if alt.mode == ALL else alt.count
        if need == 0 or need > most:
            shown = "all devices" if alt.mode == ALL else f"{need} device(s)"
            return f"asks for {shown} of DeviceClass {alt.class_name!r}; the most any node has is {most}"
        self.requests[key] = self.requests.get(key, 0) + need * 1000
        return None

    def claim(self, obj: str, field_prefix: str, spec: ClaimSpec) -> None:
        for i, request in enumerate(spec.requests):
            self.request(obj, f"{field_prefix}.devices.requests[{i}]", request)


def pod_demand(
    pod: PodInfo, inventory: DeviceInventory, nodes: Sequence[NodeInfo], counted_here: Callable[[str], bool]
) -> DeviceDemand:
    """The devices POD still needs, per device resource; `counted_here(claim key)` says whether a
    claim shared by several pods is counted on this one."""
    out = _Collect(inventory, nodes)
    for ref in pod.claims:
        claim: ClaimInfo | None
        if ref.template_name is not None:
            made = inventory.claims.get(f"{pod.namespace}/{ref.generated}") if ref.generated else None
            if made is None:  # kube-controller-manager has not made the pod's claim yet
                template = inventory.templates.get(f"{pod.namespace}/{ref.template_name}")
                if template is None:
                    out.warnings.append(f"Pod {pod.key}: ResourceClaimTemplate {ref.template_name} is not visible yet")
                else:
                    out.claim(f"ResourceClaimTemplate {template.key}", "spec.spec", template.spec)
                continue
            claim = made
        else:
            claim = inventory.claims.get(f"{pod.namespace}/{ref.claim_name}")
            if claim is None:
                out.warnings.append(f"Pod {pod.key}: ResourceClaim {ref.claim_name} is not visible yet")
                continue
        if not claim.is_allocated and counted_here(claim.key):
            out.claim(f"ResourceClaim {claim.key}", "spec", claim.spec)
    return DeviceDemand(out.requests, tuple(out.errors), tuple(out.warnings))
