"""Every label, annotation and kind the grouper reads, in one place.

The constants of topogang's own PodGroup API (`pod-group-name`, `kai.scheduler/subgroup-name`,
`kai.scheduler/topology`) stay in `extender.model.labels`; these are the other projects'.
"""

from __future__ import annotations

from extender.model.labels import TOPOLOGY_ANNOTATION

# -- KAI's workload annotations (seed 000) --------------------------------------------------------
KAI_TOPOLOGY = TOPOLOGY_ANNOTATION  # "kai.scheduler/topology": which Topology object
KAI_REQUIRED = "kai.scheduler/topology-required-placement"
KAI_PREFERRED = "kai.scheduler/topology-preferred-placement"
KAI_SEGMENT_SIZE = "kai.scheduler/segment-size"
KAI_SEGMENT_REQUIRED = "kai.scheduler/segment-topology-required-placement"
KAI_SEGMENT_PREFERRED = "kai.scheduler/segment-topology-preferred-placement"
KAI_POD_INDEX_LABEL = "kai.scheduler/pod-index-label"
KAI_SEGMENT_ANNOTATIONS = (KAI_SEGMENT_SIZE, KAI_SEGMENT_REQUIRED, KAI_SEGMENT_PREFERRED)

# -- Kueue's PodSet annotations (seed 004 and Kueue's TAS API) -------------------------------------
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
KUEUE_SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
KUEUE_SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
KUEUE_SLICE_CONSTRAINTS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
KUEUE_MAX_LAYERS = 3

# -- Kubeflow training operator and MPI operator ---------------------------------------------------
KF_JOB_NAME = "training.kubeflow.org/job-name"
KF_OPERATOR_NAME = "training.kubeflow.org/operator-name"
KF_REPLICA_TYPE = "training.kubeflow.org/replica-type"
KF_REPLICA_INDEX = "training.kubeflow.org/replica-index"
KF_JOB_ROLE = "training.kubeflow.org/job-role"

# -- batch/v1 Job -----------------------------------------------------------------------------------
JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOB_NAME = "batch.kubernetes.io/job-name"
JOB_NAME_LEGACY = "job-name"
JOB_CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
JOB_CONTROLLER_UID_LEGACY = "controller-uid"

# -- LeaderWorkerSet (seed 002) ---------------------------------------------------------------------
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_GROUP_KEY = "leaderworkerset.sigs.k8s.io/group-key"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
LWS_LEADER_NAME = "leaderworkerset.sigs.k8s.io/leader-name"
LWS_SUBGROUP_INDEX = "leaderworkerset.sigs.k8s.io/subgroup-index"
LWS_SUBGROUP_SIZE = "leaderworkerset.sigs.k8s.io/subgroup-size"
LWS_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/exclusive-topology"
LWS_SUBGROUP_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"
LWS_LEADER_COUNT = 1  # one leader per group; workers' worker-index starts after it

# -- JobSet ------------------------------------------------------------------------------------------
JS_NAME = "jobset.sigs.k8s.io/jobset-name"
JS_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JS_REPLICATED_JOB_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
JS_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JS_JOB_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
JS_JOB_KEY = "jobset.sigs.k8s.io/job-key"
JS_EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"

# -- KubeRay -------------------------------------------------------------------------------------------
RAY_CLUSTER = "ray.io/cluster"
RAY_NODE_TYPE = "ray.io/node-type"
RAY_GROUP = "ray.io/group"
RAY_IDENTIFIER = "ray.io/identifier"
RAY_IS_NODE = "ray.io/is-ray-node"
RAY_HEAD_GROUP = "headgroup"

# -- kinds ---------------------------------------------------------------------------------------------
BATCH_V1 = "batch/v1"
KUBEFLOW_V1 = "kubeflow.org/v1"
MPI_V2BETA1 = "kubeflow.org/v2beta1"
LWS_V1 = "leaderworkerset.x-k8s.io/v1"
JOBSET_V1ALPHA2 = "jobset.x-k8s.io/v1alpha2"
RAY_V1 = "ray.io/v1"
APPS_V1 = "apps/v1"
RESOURCE_INTERFACE_API = "scheduling.topogang.io/v1alpha1"
RESOURCE_INTERFACE_KIND = "ResourceInterface"
RESOURCE_INTERFACE_APIS = frozenset({RESOURCE_INTERFACE_API, "kai.scheduler/v1"})

# Kubeflow kinds -> the spec field holding their replica specs.
KUBEFLOW_REPLICA_SPECS = {
    (KUBEFLOW_V1, "TFJob"): "tfReplicaSpecs",
    (KUBEFLOW_V1, "PyTorchJob"): "pytorchReplicaSpecs",
    (KUBEFLOW_V1, "JAXJob"): "jaxReplicaSpecs",
    (KUBEFLOW_V1, "XGBoostJob"): "xgbReplicaSpecs",
    (MPI_V2BETA1, "MPIJob"): "mpiReplicaSpecs",
}

# Pods whose owner chain reaches one of these are never a gang: a DaemonSet's pods are one per
# node by construction, and a Node owns the mirror pods of its static pods.
PLAIN_OWNERS = frozenset({("v1", "Node"), (APPS_V1, "DaemonSet")})

# Extended resources that count as an accelerator (LWS shifts subgroup indexes when the leader
# requests none, seed 002).
ACCELERATOR_RESOURCES = frozenset(
    {"nvidia.com/gpu", "amd.com/gpu", "google.com/tpu", "intel.com/gpu", "habana.ai/gaudi", "aws.amazon.com/neuron"}
)


def is_accelerator(resource: str) -> bool:
    return (
        resource in ACCELERATOR_RESOURCES
        or resource.endswith(("/gpu", "/tpu"))
        or resource.startswith(("nvidia.com/mig-", "aws.amazon.com/neuron"))
    )
