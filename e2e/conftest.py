"""Fixtures for end-to-end tests on a real control plane.

- `control_plane` (session): the local control plane of e2e/controlplane (etcd, kube-apiserver,
  kube-controller-manager, kwok, stock kube-scheduler), started once per session. Built by
  `make controlplane`, which `make test` runs first.
- `kubeconfig` (session): the kubeconfig scenarios use. With TOPOGANG_E2E_KUBECONFIG set, that
  cluster is used instead (e.g. kind with kwok) and tests needing `control_plane` are skipped.
- `kube_api`, `namespace`, `fake_gpu_nodes` (per test): an ApiClient, a fresh namespace, and a
  FakeGpuNodes helper whose nodes are deleted after the test.
- `scheduler` (per test): restart kube-scheduler with another configuration for one test; the
  stock scheduler is back afterwards.

Markers: `controlplane` (needs a cluster: the local plane or TOPOGANG_E2E_KUBECONFIG's) and
`controlplane_only` (only on the local plane: tests of its own components, of extender.kube
against its API server, of the install artefacts; `make e2e-kind` deselects them with
`-m "not controlplane_only"` and runs the scenarios of test_extender.py).

Async tests and fixtures here run in the session event loop: mark modules with
`pytestmark = pytest.mark.asyncio(loop_scope="session")`.

When any test failed, the control plane's working directory (logs, certificates, configs) is
kept and its path printed at the end of the run.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from kubernetes_asyncio import client

from e2e.controlplane import (
    Binaries,
    BinariesNotBuilt,
    ComponentError,
    ControlPlane,
    FakeGpuNodes,
    SchedulerSwitch,
    api_client,
    create_namespace,
    delete_namespace,
    sigterm_raises_keyboard_interrupt,
)
from extender.kube import KubeClient

KUBECONFIG_ENV = "TOPOGANG_E2E_KUBECONFIG"

_plane_key = pytest.StashKey[ControlPlane]()
_kept_key = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "controlplane_only: needs the local control plane itself (deselected by make e2e-kind)"
    )


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    if os.environ.get(KUBECONFIG_ENV):
        pytest.skip(f"needs the local control plane; {KUBECONFIG_ENV} points at another cluster")
    try:
        binaries = Binaries.locate()
    except BinariesNotBuilt as e:
        pytest.fail(str(e), pytrace=False)
    config = request.config
    plane = ControlPlane(binaries=binaries, scheduler=True)
    with sigterm_raises_keyboard_interrupt():
        failure = None
        try:
            plane.start()
        except ComponentError as e:
            config.stash[_kept_key] = plane.workdir
            failure = f"the local control plane did not start: {e}"
        if failure is not None:
            pytest.fail(failure, pytrace=False)
        config.stash[_plane_key] = plane
        try:
            yield plane
        finally:
            failed = request.session.testsfailed > 0
            plane.stop(keep_workdir=failed)
            if failed:
                config.stash[_kept_key] = plane.workdir


@pytest.fixture(scope="session")
def kubeconfig(request: pytest.FixtureRequest) -> Path:
    external = os.environ.get(KUBECONFIG_ENV)
    if external:
        return Path(external)
    plane: ControlPlane = request.getfixturevalue("control_plane")
    return plane.kubeconfig


@pytest_asyncio.fixture(loop_scope="session")
async def kube_api(kubeconfig: Path) -> AsyncIterator[client.ApiClient]:
    async with api_client(kubeconfig) as api:
        yield api


@pytest_asyncio.fixture(loop_scope="session")
async def namespace(kube_api: client.ApiClient) -> AsyncIterator[str]:
    name = await create_namespace(kube_api)
    yield name
    await delete_pods(kube_api, name)
    await delete_namespace(kube_api, name)


async def delete_pods(api: client.ApiClient, namespace: str, within: float = 30.0) -> None:
    """Delete NAMESPACE's pods now and wait until they are gone: the namespace controller takes
    its time (tens of seconds on a busy machine), and a gang left pending there would be placed on
    the next test's nodes."""
    core = client.CoreV1Api(api)
    await core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    deadline = asyncio.get_running_loop().time() + within
    while asyncio.get_running_loop().time() < deadline:
        if not (await core.list_namespaced_pod(namespace)).items:
            return
        await asyncio.sleep(0.2)


@pytest_asyncio.fixture(loop_scope="session")
async def kube(kubeconfig: Path) -> AsyncIterator[KubeClient]:
    """topogang's own raw-JSON client (extender.kube) for the same cluster."""
    async with await KubeClient.connect(kubeconfig) as raw:
        yield raw


@pytest_asyncio.fixture(loop_scope="session")
async def fake_gpu_nodes(kube_api: client.ApiClient) -> AsyncIterator[FakeGpuNodes]:
    # A prefix per test, so a test never meets the nodes of the one before.
    nodes = FakeGpuNodes(kube_api, name_prefix=f"gpu-{uuid.uuid4().hex[:4]}")
    yield nodes
    await nodes.delete_all()


@pytest_asyncio.fixture(loop_scope="session")
async def scheduler(control_plane: ControlPlane) -> AsyncIterator[SchedulerSwitch]:
    switch = SchedulerSwitch(control_plane)
    yield switch
    await switch.restore()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    plane = item.config.stash.get(_plane_key, None)
    if report.failed and plane is not None and item.get_closest_marker("controlplane"):
        sections = [plane.describe()]
        scheduler = plane.components.get("kube-scheduler")
        if scheduler is not None:
            sections.append(f"--- last lines of {scheduler.log_path} ---\n{scheduler.tail(30)}")
        report.sections.append(("control plane", "\n".join(sections)))
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    config = terminalreporter.config
    plane = config.stash.get(_plane_key, None)
    if plane is not None and "total" in plane.startup_seconds:
        parts = ", ".join(
            f"{name} {seconds:.1f}s" for name, seconds in plane.startup_seconds.items() if name != "total"
        )
        terminalreporter.write_line(f"local control plane: up in {plane.startup_seconds['total']:.1f}s ({parts})")
    kept = config.stash.get(_kept_key, None)
    if kept is not None:
        terminalreporter.write_line(f"local control plane: files and logs kept in {kept}")
