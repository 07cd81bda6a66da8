"""Every label and annotation topogang reads or writes, in one place (the README lists them too)."""

# A pod joins a PodGroup object by name through either of these.
POD_GROUP_ANNOTATION = "pod-group-name"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
# A pod joins a leaf SubGroup of its PodGroup.
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"

# Which Topology object a PodGroup's constraints use when they do not name one.
TOPOLOGY_ANNOTATION = "kai.scheduler/topology"
