"""The placement annotations the grouper reads on every kind (KAI's and Kueue's), and the kinds
it treats apart. Each workload kind's own labels live in its module under `kinds`; the constants
of topogang's own PodGroup API (`pod-group-name`, `kai.scheduler/subgroup-name`,
`kai.scheduler/topology`) in `extender.model.labels`.
"""

from __future__ import annotations

from extender.model.labels import TOPOLOGY_ANNOTATION

# -- KAI's workload annotations (KAI's segment design) --------------------------------------------------------
KAI_TOPOLOGY = TOPOLOGY_ANNOTATION  # "kai.scheduler/topology": which Topology object
KAI_REQUIRED = "kai.scheduler/topology-required-placement"
KAI_PREFERRED = "kai.scheduler/topology-preferred-placement"
KAI_SEGMENT_SIZE = "kai.scheduler/segment-size"
KAI_SEGMENT_REQUIRED = "kai.scheduler/segment-topology-required-placement"
KAI_SEGMENT_PREFERRED = "kai.scheduler/segment-topology-preferred-placement"
KAI_POD_INDEX_LABEL = "kai.scheduler/pod-index-label"
KAI_SEGMENT_ANNOTATIONS = (KAI_SEGMENT_SIZE, KAI_SEGMENT_REQUIRED, KAI_SEGMENT_PREFERRED)

# -- Kueue's PodSet annotations (Kueue's TAS KEP and Kueue's TAS API) -------------------------------------
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
KUEUE_SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
KUEUE_SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
KUEUE_SLICE_CONSTRAINTS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
KUEUE_MAX_LAYERS = 3
# PodSets (PodTemplates) that share this name are placed under one constraint, in one domain.
KUEUE_PODSET_GROUP = "kueue.x-k8s.io/podset-group-name"
# The scheduling gate Kueue puts on the PodTemplate of a workload it admitted to a flavor with
# spec.topologyName (its Topology Aware Scheduling): Kueue then picks each pod's domain itself.
KUEUE_TAS_GATE = "kueue.x-k8s.io/topology"
# The TAS KEP's own names, read as aliases of the podset-* ones.
KUEUE_REQUIRE = "kueue.x-k8s.io/require-topology"
KUEUE_PREFER = "kueue.x-k8s.io/prefer-topology"

# Every spelling of a scope's placement, in the order they are read, with the attribute it sets.
KUEUE_SPELLINGS = (
    (KUEUE_REQUIRED, "required"),
    (KUEUE_REQUIRE, "required"),
    (KUEUE_PREFERRED, "preferred"),
    (KUEUE_PREFER, "preferred"),
)
PLACEMENT_SPELLINGS = ((KAI_REQUIRED, "required"), (KAI_PREFERRED, "preferred"), *KUEUE_SPELLINGS)
KUEUE_PLACEMENT = frozenset({*(a for a, _ in KUEUE_SPELLINGS), KUEUE_UNCONSTRAINED})

# -- kinds ---------------------------------------------------------------------------------------------
APPS_V1 = "apps/v1"
RESOURCE_INTERFACE_API = "scheduling.topogang.io/v1alpha1"
RESOURCE_INTERFACE_KIND = "ResourceInterface"
RESOURCE_INTERFACE_APIS = frozenset({RESOURCE_INTERFACE_API, "kai.scheduler/v1"})

# Pods whose owner chain reaches one of these are never a gang: a DaemonSet's pods are one per
# node by construction, and a Node owns the mirror pods of its static pods.
PLAIN_OWNERS = frozenset({("v1", "Node"), (APPS_V1, "DaemonSet")})
