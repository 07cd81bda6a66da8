"""A real Kubernetes control plane for tests and for trying topogang locally, without Docker.

build.sh builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kwok
from Go modules (versions in versions.env) into a cache outside the repository; ControlPlane
runs them on loopback; FakeGpuNodes makes kwok-managed GPU nodes. `make cluster` runs it in the
foreground for people; e2e/conftest.py has the pytest fixtures.
"""

from .binaries import Binaries, BinariesNotBuilt, pinned_versions
from .fakenodes import (
    FAKE_NODE_LABEL,
    GPU_RESOURCE,
    KWOK_ANNOTATION,
    FakeGpuNodes,
    FakeTopology,
    GpuNodeShape,
    Place,
    TopologyLabels,
    node_manifest,
)
from .kube import (
    api_client,
    create_namespace,
    create_pod,
    delete_namespace,
    gpu_pod,
    read_pod,
    wait_for,
    wait_pod_running,
    wait_pod_unschedulable,
)
from .plane import ControlPlane, SchedulerConfig, SchedulerSwitch
from .process import Component, ComponentError, sigterm_raises_keyboard_interrupt

__all__ = [
    "FAKE_NODE_LABEL",
    "GPU_RESOURCE",
    "KWOK_ANNOTATION",
    "Binaries",
    "BinariesNotBuilt",
    "Component",
    "ComponentError",
    "ControlPlane",
    "FakeGpuNodes",
    "FakeTopology",
    "GpuNodeShape",
    "Place",
    "SchedulerConfig",
    "SchedulerSwitch",
    "TopologyLabels",
    "api_client",
    "create_namespace",
    "create_pod",
    "delete_namespace",
    "gpu_pod",
    "node_manifest",
    "pinned_versions",
    "read_pod",
    "sigterm_raises_keyboard_interrupt",
    "wait_for",
    "wait_pod_running",
    "wait_pod_unschedulable",
]
