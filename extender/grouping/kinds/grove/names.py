"""Grove's names topogang reads and writes (ai-dynamo/grove operator/api/common, v0.1.0-alpha.11)."""

from __future__ import annotations

from extender.model.pod import PodInfo

GROVE_V1 = "grove.io/v1alpha1"
SCHEDULER_V1 = "scheduler.grove.io/v1alpha1"
PODGANG_KIND = "PodGang"

PODGANG = "grove.io/podgang"
BASE_PODGANG = "grove.io/base-podgang"
PODCLIQUE = "grove.io/podclique"
PCS_REPLICA = "grove.io/podcliqueset-replica-index"
PCSG = "grove.io/podcliquescalinggroup"
PCSG_REPLICA = "grove.io/podcliquescalinggroup-replica-index"
POD_INDEX = "grove.io/podclique-pod-index"
TOPOLOGY_NAME = "grove.io/topology-name"
MANAGED_BY = {"app.kubernetes.io/managed-by": "grove-operator"}
PART_OF = "app.kubernetes.io/part-of"
COMPONENT = "app.kubernetes.io/component"
HOSTNAME = "kubernetes.io/hostname"
SCHEDULING_GATE = "grove.io/podgang-pending-creation"  # on pods until their PodGang lists them


def reads(pod: PodInfo) -> tuple[tuple[str, str], ...]:
    """The object besides its owners the grouper reads for POD: the PodGang it names."""
    name = pod.labels.get(PODGANG)
    return ((PODGANG_KIND, name),) if name else ()
