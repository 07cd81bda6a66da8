"""The labels and annotations of the PodGroup API topogang reads (docs/annotations.md lists them too).

The placement annotations of other projects live with the grouper that reads them:
`extender.grouping.names` (KAI's and Kueue's), and each workload kind's own labels in its module
under `extender.grouping.kinds`. Every annotation topogang reads is defined in
`extender.model.annotation_keys`, beside the keys of the projects it comes from.
"""

from extender.model import annotation_keys as keys

# A pod joins a PodGroup object by name through either of these.
POD_GROUP_ANNOTATION = "pod-group-name"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
# A pod joins a leaf SubGroup of its PodGroup.
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"

# Which Topology object a PodGroup's constraints use when they do not name one.
TOPOLOGY_ANNOTATION = keys.KAI_TOPOLOGY

# Where a workload asks to be evicted whole when it cannot be repaired in time: on its pods (a
# pod template, so that every kind of workload can set it) or on the group object it names (a
# topogang PodGroup, or the root of a scheduling.k8s.io tree).
ON_UNREPAIRABLE = keys.ON_UNREPAIRABLE
