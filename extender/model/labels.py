"""The labels and annotations by which pods and PodGroups name their gang and Topology.

Workload kinds keep the labels they read with their grouper (extender/grouping), and the
labels topogang writes live with their writer (extender/kube); the README lists them all.
"""

# A pod joins a PodGroup object by name through either of these.
POD_GROUP_ANNOTATION = "pod-group-name"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
# A pod joins a leaf SubGroup of its PodGroup.
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"

# Which Topology object a PodGroup's constraints use when they do not name one.
TOPOLOGY_ANNOTATION = "kai.scheduler/topology"
