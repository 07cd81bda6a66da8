"""Resource: a kind of Kubernetes object as the API server serves it (API group, versions, plural,
scope), and the paths to list, watch and address it. Pure: the paths are strings.

A Resource lists its versions in order of preference; the informer lists the first one the API
server serves (Kueue's Topology is v1beta2 in new releases, v1beta1 and v1alpha1 in older ones),
so a kind served in several versions is still watched once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core API
    versions: tuple[str, ...]  # preferred first
    kind: str
    plural: str
    namespaced: bool

    @property
    def name(self) -> str:
        """'pods', 'podgroups.scheduling.topogang.io': the name a CRD has, for logs."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version

    def collection_path(self, version: str, namespace: str | None = None) -> str:
        """Where to list and watch: every namespace unless `namespace` is given."""
        base = f"/apis/{self.group}/{version}" if self.group else f"/api/{version}"
        if namespace and self.namespaced:
            return f"{base}/namespaces/{namespace}/{self.plural}"
        return f"{base}/{self.plural}"

    def object_path(self, version: str, name: str, namespace: str | None = None, subresource: str = "") -> str:
        if self.namespaced and not namespace:
            raise ValueError(f"{self.kind} {name}: a namespaced object needs a namespace")
        path = f"{self.collection_path(version, namespace)}/{name}"
        return f"{path}/{subresource}" if subresource else path
