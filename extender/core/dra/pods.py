"""ClaimedPods: the pods that have ResourceClaims, as read, and their devices added to them.

ClusterState keeps a pod's `requests` with the devices its claims still need; this part keeps
each such pod as read from the API server, knows which pods a claim or template concerns, and
which pod a shared claim is counted on (the first by key: a shared claim counts once).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace

from extender.core.dra.demand import pod_demand
from extender.core.dra.inventory import DeviceInventory
from extender.model.node import NodeInfo
from extender.model.pod import PodInfo


def _shared(pod: PodInfo) -> set[str]:
    """The claims POD uses that other pods may use too: those it names (resourceClaimName), and
    those made for it from a template (status.resourceClaimStatuses), which name one claim for all
    the pods of a Kubernetes PodGroup whose spec.resourceClaims holds that template (KEP-5729)."""
    return {f"{pod.namespace}/{name}" for c in pod.claims if (name := c.claim_name or c.generated)}


def _refs(pod: PodInfo) -> set[str]:
    """The claims (ns/name) and templates (ns/template:name) POD's demand depends on."""
    out = set()
    for ref in pod.claims:
        for name in (ref.claim_name, ref.generated):
            if name:
                out.add(sys.intern(f"{pod.namespace}/{name}"))  # the inventory's key for the claim too
        if ref.template_name:
            out.add(f"{pod.namespace}/template:{ref.template_name}")
    return out


class ClaimedPods:
    def __init__(self, inventory: DeviceInventory) -> None:
        self.inventory = inventory
        self.raw: dict[str, PodInfo] = {}  # pod -> as read (the same object while it needs no device)
        # claim or template -> the pod that depends on it, or the pods when several do (a claim
        # made for one pod has one reader: kept as a string, not a set of one, for memory)
        self._readers: dict[str, str | set[str]] = {}
        self._shared: dict[str, set[str]] = {}  # claim named by resourceClaimName -> its pods

    def track(self, pod: PodInfo | None, key: str) -> set[str]:
        """Remember POD (None: deleted); returns the other pods whose demand changes with it:
        those sharing a claim it joins or leaves (which of them counts the claim may change)."""
        old = self.raw.pop(key, None)
        before = _shared(old) if old is not None else set()
        after = _shared(pod) if pod is not None and pod.claims else set()
        if old is not None:
            for ref in _refs(old):
                self._unread(ref, key)
        if pod is not None and pod.claims:
            self.raw[key] = pod
            for ref in _refs(pod):
                self._read(ref, key)
        others: set[str] = set()
        for claim in before ^ after:
            users = self._shared.setdefault(claim, set())
            others |= users
            if claim in after:
                users.add(key)
            else:
                users.discard(key)
                if not users:
                    del self._shared[claim]
        return others - {key}

    def _read(self, ref: str, pod: str) -> None:
        found = self._readers.get(ref)
        if found is None or found == pod:
            self._readers[ref] = pod
        elif isinstance(found, str):
            self._readers[ref] = {found, pod}
        else:
            found.add(pod)

    def _unread(self, ref: str, pod: str) -> None:
        found = self._readers.get(ref)
        if found == pod:
            del self._readers[ref]
        elif isinstance(found, set):
            found.discard(pod)
            if len(found) == 1:
                self._readers[ref] = found.pop()

    def readers(self, key: str, template: bool = False) -> set[str]:
        namespace, _, name = key.partition("/")
        found = self._readers.get(f"{namespace}/template:{name}" if template else key)
        return {found} if isinstance(found, str) else set(found or ())

    def derive(self, raw: PodInfo, nodes: Sequence[NodeInfo]) -> PodInfo:
        """RAW with its devices added to its requests, and what could not be counted."""
        if not raw.claims:
            return raw
        demand = pod_demand(
            raw, self.inventory, nodes, lambda claim: min(self._shared.get(claim, {raw.key})) == raw.key
        )
        if not demand.requests and not demand.errors and not demand.warnings:
            return raw  # its claims are allocated: nothing to add, nothing to copy
        requests = dict(raw.requests)
        for resource, value in demand.requests.items():
            requests[resource] = requests.get(resource, 0) + value
        return replace(raw, requests=requests, device_errors=demand.errors, device_warnings=demand.warnings)

    def held(self, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Mapping[str, int]:
        """POD's requests plus the devices its own allocated claims hold (made for it, or named
        by it alone): the room a running pod gives back when it is evicted."""
        if not pod.claims:
            return pod.requests
        own = []
        for ref in pod.claims:
            name = ref.generated or ref.claim_name
            claim = self.inventory.claims.get(f"{pod.namespace}/{name}") if name else None
            shared = len(self._shared.get(claim.key if claim else "", ())) > 1
            if claim is not None and claim.is_allocated and not shared:
                own.append(claim)
        held = self.inventory.held(own, nodes)
        if not held:
            return pod.requests
        out = dict(pod.requests)
        for resource, value in held.items():
            out[resource] = out.get(resource, 0) + value
        return out
