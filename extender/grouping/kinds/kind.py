"""WorkloadKind: everything topogang knows about one kind of workload, declared in one place."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from extender.grouping.grouper import Grouper
from extender.grouping.synthesis import Synthesis
from extender.model.pod import PodInfo
from extender.model.resource import Resource

# Adds the pods (and intermediate owners) the kind's controller would create to the Synthesis.
Synthesizer = Callable[[Synthesis], None]

# The objects besides its owners the grouper reads for a pod, as (kind, name) in the pod's
# namespace: a change to one of them regroups the pod (Grove: the PodGang the pod names).
Reads = Callable[[PodInfo], tuple[tuple[str, str], ...]]


def no_reads(pod: PodInfo) -> tuple[tuple[str, str], ...]:
    return ()


@dataclass(frozen=True)
class WorkloadKind:
    resource: Resource  # the owner object as the API server serves it (watched by the cache)
    group: Grouper  # its gangs and how its pods join them
    synthesize: Synthesizer  # the pods its controller would create
    index_label: str | None = None  # KAI's segment design's default pod index label (a Job's: when Indexed)
    reads: Reads = no_reads
    # What else the cache must watch for this kind: the owners between its pods and it (Grove's
    # PodCliques) and the objects `reads` names (Grove's PodGangs).
    watch: tuple[Resource, ...] = ()

    @property
    def gvk(self) -> tuple[str, str]:
        """(apiVersion, kind), as a pod's ownerReference names the owner."""
        return (self.resource.api_version(self.resource.versions[0]), self.resource.kind)


def owner(group: str, version: str, kind: str, plural: str) -> Resource:
    """The Resource of a namespaced workload owner served in one version."""
    return Resource(group, (version,), kind, plural, namespaced=True)
