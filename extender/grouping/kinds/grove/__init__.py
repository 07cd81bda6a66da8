"""Grove (NVIDIA's ai-dynamo/grove): disaggregated inference as a PodCliqueSet of PodCliques and
PodCliqueScalingGroups. Checked against Grove's source at its newest release v0.1.0-alpha.11
(commit 8fa3ece93434d7c0005605b7dc4b0e23610af88b; the API is unchanged at v0.1.0-alpha.12-rc1,
19905d53, and at main, fcc3b3bb): `operator/api/core/v1alpha1` (grove.io) and
`scheduler/api/core/v1alpha1` (scheduler.grove.io), names from `operator/api/common`.

Which object: the PodGang, as KAI's Grove pod-grouper plugin groups (NVIDIA/KAI-Scheduler
`pkg/podgrouper/podgrouper/plugins/grove`, read at 72de64fc). Grove publishes for the scheduler
the gangs it wants: one base PodGang `<pcs>-<replica>` per PodCliqueSet replica (its standalone
PodCliques and the scaling groups' replicas below minAvailable) and one scaled PodGang
`<pcsg>-<k>` per scaling-group replica beyond it. Each pod names its PodGang in the label
`grove.io/podgang`. The grouper is registered on the PodCliqueSet (the pods' top owner, as in
KAI) and reads that PodGang:

    PodGroup <ns>/podgang-<podgang>     spec.topologyConstraint.packConstraint (required, preferred)
    ├── <pcs>-0-<clique>                a spec.podgroups entry (one PodClique): minMember = minReplicas,
    │                                   its topologyConstraint.packConstraint; pods: the PodClique's
    └── <pcs>-0-<sg>-<j>                a spec.topologyConstraintGroupConfigs entry (one replica of a
        ├── <pcs>-0-<sg>-<j>-<clique>   scaling group): a SubGroup over its podGroupNames, all
        └── ...                         required, with its packConstraint

Levels are the node label keys Grove translated the user's domains to (through its
ClusterTopologyBinding); topogang resolves them against the Topology named by the PodGang's
`grove.io/topology-name` annotation (the KAI Topology Grove keeps under the binding's name), else
`kai.scheduler/topology`, else the only Topology. KAI's placement annotations mirrored from the
PodCliqueSet fill in what the PodGang's own constraint leaves unset (KAI's order). A pod joins
the SubGroup of its PodClique (its controller); one listed in another PodGroup's podReferences,
or a reference to another namespace (KAI refuses those), makes the gang Invalid. A pod whose
PodGang is not visible yet waits. `spec.priorityClassName` is not read: a gang's priority is its
pods'. The PodCliques' annotations (KAI segments) are not read: the PodGang is the tree, as in
KAI. Unknown fields are not reported (as for other workload objects: Grove writes them).
DynamoGraphDeployment -> PodCliqueSet: Dynamo's object is not read; a ResourceInterface on it
without podGroups hands off to this grouper (KAI's generic pod-grouping design).

Synthesized as Grove's operator would create them, for each PodCliqueSet replica r:
PodCliqueSet -> PodClique `<pcs>-<r>-<clique>` -> Pod `<pclq>-<i>`; PodCliqueSet ->
PodCliqueScalingGroup `<pcs>-<r>-<sg>` -> PodClique `<pcs>-<r>-<sg>-<j>-<clique>` -> Pod; and the
PodGangs (owned by the PodCliqueSet) listing them. Grove names pods `<pclq>-<random>`: here the
suffix is the pod index. The synthesizer cannot see the ClusterTopologyBinding: it writes each
domain as the level name (`host` as the node), which topogang resolves by short name; give the
PodGangs in the input to use Grove's translation (objects in the input win).
"""

from __future__ import annotations

from extender.grouping.kinds.grove.names import PODGANG, PODGANG_KIND, SCHEDULING_GATE, reads
from extender.grouping.kinds.grove.podgang import group_podcliqueset, read_podgang
from extender.grouping.kinds.grove.pods import synthesize_podcliqueset
from extender.grouping.kinds.kind import WorkloadKind, owner
from extender.model.resource import Resource


def _grove(kind: str, plural: str) -> Resource:
    return owner("grove.io", "v1alpha1", kind, plural)


KINDS = (
    WorkloadKind(
        _grove("PodCliqueSet", "podcliquesets"),
        group_podcliqueset,
        synthesize_podcliqueset,
        reads=reads,
        watch=(
            _grove("PodClique", "podcliques"),
            _grove("PodCliqueScalingGroup", "podcliquescalinggroups"),
            owner("scheduler.grove.io", "v1alpha1", PODGANG_KIND, "podgangs"),
        ),
    ),
)

__all__ = ["KINDS", "PODGANG", "SCHEDULING_GATE", "read_podgang"]
