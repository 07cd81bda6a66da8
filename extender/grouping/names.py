"""The placement annotations the grouper reads on every kind (KAI's and Kueue's), and the kinds
it treats apart. Each workload kind's own labels live in its module under `kinds`; the constants
of topogang's own PodGroup API (`pod-group-name`, `kai.scheduler/subgroup-name`,
`kai.scheduler/topology`) in `extender.model.labels`.
"""

from __future__ import annotations

from extender.model import annotation_keys as keys

# The annotations are defined once, with every other key of their projects, in
# extender.model.annotation_keys; these are the names the grouper uses.
# -- KAI's workload annotations (KAI's segment design) --------------------------------------------------------
KAI_TOPOLOGY = keys.KAI_TOPOLOGY  # which Topology object
KAI_REQUIRED = keys.KAI_REQUIRED
KAI_PREFERRED = keys.KAI_PREFERRED
KAI_SEGMENT_SIZE = keys.KAI_SEGMENT_SIZE
KAI_SEGMENT_REQUIRED = keys.KAI_SEGMENT_REQUIRED
KAI_SEGMENT_PREFERRED = keys.KAI_SEGMENT_PREFERRED
KAI_POD_INDEX_LABEL = keys.KAI_POD_INDEX_LABEL
KAI_SEGMENT_ANNOTATIONS = (KAI_SEGMENT_SIZE, KAI_SEGMENT_REQUIRED, KAI_SEGMENT_PREFERRED)

# -- Kueue's PodSet annotations (Kueue's TAS KEP and Kueue's TAS API) -------------------------------------
KUEUE_REQUIRED = keys.KUEUE_REQUIRED
KUEUE_PREFERRED = keys.KUEUE_PREFERRED
KUEUE_UNCONSTRAINED = keys.KUEUE_UNCONSTRAINED
KUEUE_SLICE_REQUIRED = keys.KUEUE_SLICE_REQUIRED
KUEUE_SLICE_SIZE = keys.KUEUE_SLICE_SIZE
KUEUE_SLICE_CONSTRAINTS = keys.KUEUE_SLICE_CONSTRAINTS
KUEUE_MAX_LAYERS = 3
# PodSets (PodTemplates) that share this name are placed under one constraint, in one domain.
KUEUE_PODSET_GROUP = keys.KUEUE_PODSET_GROUP
# The scheduling gate Kueue puts on the PodTemplate of a workload it admitted to a flavor with
# spec.topologyName (its Topology Aware Scheduling): Kueue then picks each pod's domain itself.
KUEUE_TAS_GATE = "kueue.x-k8s.io/topology"
# The TAS KEP's own names, read as aliases of the podset-* ones.
KUEUE_REQUIRE = keys.KUEUE_REQUIRE
KUEUE_PREFER = keys.KUEUE_PREFER

# Every spelling of a scope's placement, in the order they are read, with the attribute it sets.
KUEUE_SPELLINGS = (
    (KUEUE_REQUIRED, "required"),
    (KUEUE_REQUIRE, "required"),
    (KUEUE_PREFERRED, "preferred"),
    (KUEUE_PREFER, "preferred"),
)
PLACEMENT_SPELLINGS = ((KAI_REQUIRED, "required"), (KAI_PREFERRED, "preferred"), *KUEUE_SPELLINGS)
KUEUE_PLACEMENT = frozenset({*(a for a, _ in KUEUE_SPELLINGS), KUEUE_UNCONSTRAINED})
# The values Kueue reads as a boolean in podset-unconstrained-topology (Go's strconv.ParseBool).
KUEUE_BOOLEANS = frozenset({"1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False"})

# -- kinds ---------------------------------------------------------------------------------------------
APPS_V1 = "apps/v1"
RESOURCE_INTERFACE_API = "scheduling.topogang.io/v1alpha1"
RESOURCE_INTERFACE_KIND = "ResourceInterface"
RESOURCE_INTERFACE_APIS = frozenset({RESOURCE_INTERFACE_API, "kai.scheduler/v1"})

# Pods whose owner chain reaches one of these are never a gang: a DaemonSet's pods are one per
# node by construction, and a Node owns the mirror pods of its static pods.
PLAIN_OWNERS = frozenset({("v1", "Node"), (APPS_V1, "DaemonSet")})

# The pods of an owner no grouper knows (a Deployment's, a StatefulSet's, a CRD's) are plain
# unless its metadata or pod template carries one of these: a placement to keep (KAI's topology,
# segment and Kueue's podset annotations) or a policy only a gang has (on-unrepairable, max-wait). Index
# labels, runtime bounds and exclusive-topology (read by their kinds' groupers only) ask nothing.
ASKING = frozenset(
    {
        KAI_TOPOLOGY,
        KAI_REQUIRED,
        KAI_PREFERRED,
        *KAI_SEGMENT_ANNOTATIONS,
        *KUEUE_PLACEMENT,
        KUEUE_SLICE_REQUIRED,
        KUEUE_SLICE_SIZE,
        KUEUE_SLICE_CONSTRAINTS,
        KUEUE_PODSET_GROUP,
        keys.ON_UNREPAIRABLE,
        keys.MAX_WAIT,
    }
)
# Owners whose spec.replicas is the gang's size when they ask to be one (the whole workload is
# required: a gang of the pods present would be bound before its controller made the rest).
REPLICATED_OWNERS = frozenset({(APPS_V1, "Deployment"), (APPS_V1, "ReplicaSet"), (APPS_V1, "StatefulSet")})
