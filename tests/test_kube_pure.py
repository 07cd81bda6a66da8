"""extender.kube's pure parts: the relist diff, the backoff schedule, the watch stream splitter,
API errors and the resource table."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Sequence
from typing import Any

import orjson
import pytest

from extender.kube.backoff import Backoff
from extender.kube.client import ApiError, watch_events
from extender.kube.collector import collections_held
from extender.kube.reconcile import ADDED, DELETED, MODIFIED, Seen, reconcile
from extender.kube.resources import NODES, PODS, TOPOLOGIES, WATCHED

# -- reconcile -------------------------------------------------------------------------------------


def obj(name: str, rv: str, uid: str = "", ns: str = "ml") -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name, "uid": uid or f"uid-{name}", "resourceVersion": rv}}


def known(*objs: dict[str, Any]) -> dict[str, Seen]:
    return {
        s.key: s
        for s in (
            Seen("ml", o["metadata"]["name"], o["metadata"]["uid"], o["metadata"]["resourceVersion"]) for o in objs
        )
    }


def summary(events: Sequence[tuple[str, dict[str, Any]]]) -> list[tuple[str, str, str]]:
    return [(t, o["metadata"]["name"], o["metadata"]["uid"]) for t, o in events]


@pytest.mark.parametrize(
    ("before", "listed", "want"),
    [
        pytest.param([], [obj("a", "1")], [(ADDED, "a", "uid-a")], id="first-list-adds-everything"),
        pytest.param([obj("a", "1")], [obj("a", "1")], [], id="unchanged-says-nothing"),
        pytest.param([obj("a", "1")], [obj("a", "7")], [(MODIFIED, "a", "uid-a")], id="moved-version-modifies"),
        pytest.param([obj("a", "1"), obj("b", "2")], [obj("b", "2")], [(DELETED, "a", "uid-a")], id="gone-deletes"),
        pytest.param(
            [obj("a", "1")],
            [obj("a", "9", uid="new")],
            [(DELETED, "a", "uid-a"), (ADDED, "a", "new")],
            id="recreated-under-the-same-name",
        ),
        pytest.param(
            [obj("a", "1"), obj("b", "2"), obj("c", "3")],
            [obj("c", "4"), obj("d", "5"), obj("b", "2")],
            [(DELETED, "a", "uid-a"), (MODIFIED, "c", "uid-c"), (ADDED, "d", "uid-d")],
            id="deletes-first-then-the-list-order",
        ),
    ],
)
def test_reconcile(
    before: list[dict[str, Any]], listed: list[dict[str, Any]], want: list[tuple[str, str, str]]
) -> None:
    events, fresh = reconcile(known(*before), listed, lambda s: s.tombstone("v1", "Pod"))
    assert summary(events) == want
    assert sorted(fresh) == sorted(f"ml/{o['metadata']['name']}" for o in listed)


def test_a_tombstone_carries_type_and_identity() -> None:
    events, _ = reconcile(known(obj("a", "1")), [], lambda s: s.tombstone("v1", "Pod"))
    assert events == [
        (
            DELETED,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "a", "namespace": "ml", "uid": "uid-a", "resourceVersion": "1"},
            },
        )
    ]
    assert "namespace" not in Seen("", "n1", "u", "1").tombstone("v1", "Node")["metadata"]


# -- backoff ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rand", "want"),
    [
        pytest.param(0.0, [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0], id="no-jitter-doubles-to-the-cap"),
        pytest.param(1.0, [0.4, 0.8, 1.6, 3.2, 6.4, 8.0, 8.0], id="full-jitter-shortens-by-a-fifth"),
    ],
)
def test_backoff_schedule(rand: float, want: list[float]) -> None:
    backoff = Backoff(initial=0.5, cap=10.0, jitter=0.2, rand=lambda: rand)
    assert [round(backoff.next(), 6) for _ in want] == want


def test_backoff_resets_and_survives_many_failures() -> None:
    backoff = Backoff(initial=1.0, cap=30.0, jitter=0.0)
    for _ in range(5000):
        backoff.next()
    assert backoff.next() == 30.0
    backoff.reset()
    assert backoff.next() == 1.0


@pytest.mark.parametrize("kwargs", [{"initial": 0}, {"initial": 5, "cap": 1}, {"factor": 0.5}, {"jitter": 2}])
def test_backoff_rejects_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="backoff needs"):
        Backoff(**kwargs)


# -- the watch stream ------------------------------------------------------------------------------


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


def line(event_type: str, body: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": event_type, "object": body}) + b"\n"


async def collect(*parts: bytes) -> list[tuple[str, dict[str, Any]]]:
    return [event async for event in watch_events(chunks(*parts), "/api/v1/pods")]


async def test_watch_lines_split_across_chunks_and_many_in_one_chunk() -> None:
    a, b, c = (
        line("ADDED", obj("a", "1")),
        line("MODIFIED", obj("a", "2")),
        line("BOOKMARK", {"metadata": {"resourceVersion": "3"}}),
    )
    stream = a + b + c
    for cut in range(1, len(stream)):  # every place a chunk boundary can fall
        events = await collect(stream[:cut], stream[cut:])
        assert [t for t, _ in events] == ["ADDED", "MODIFIED", "BOOKMARK"], cut
    assert [t for t, _ in await collect(b"\n", a[:5], a[5:] + b.rstrip())] == ["ADDED", "MODIFIED"]


async def test_an_error_event_raises_with_code_and_message() -> None:
    status = {
        "kind": "Status",
        "status": "Failure",
        "code": 410,
        "reason": "Expired",
        "message": "too old resource version: 1 (42)",
    }
    with pytest.raises(ApiError) as caught:
        await collect(line("ADDED", obj("a", "1")), line("ERROR", status), line("ADDED", obj("b", "2")))
    assert (caught.value.status, caught.value.gone, caught.value.reason) == (410, True, "Expired")
    assert str(caught.value) == "WATCH /api/v1/pods: 410 Expired: too old resource version: 1 (42)"


@pytest.mark.parametrize(
    ("code", "body", "want"),
    [
        pytest.param(
            409,
            orjson.dumps({"kind": "Status", "reason": "Conflict", "message": 'pod p is already assigned to node "n1"'}),
            'POST /x: 409 Conflict: pod p is already assigned to node "n1"',
            id="status",
        ),
        pytest.param(503, b"<html>unavailable</html>", "POST /x: 503 error: <html>unavailable</html>", id="not-json"),
        pytest.param(500, b"", "POST /x: 500 error: no message", id="empty"),
    ],
)
def test_api_error_from_body(code: int, body: bytes, want: str) -> None:
    error = ApiError.from_body(code, body, "POST", "/x")
    assert (error.status, str(error)) == (code, want)


# -- resources -------------------------------------------------------------------------------------


def test_paths() -> None:
    assert PODS.collection_path("v1") == "/api/v1/pods"
    assert PODS.collection_path("v1", "ml") == "/api/v1/namespaces/ml/pods"
    assert PODS.object_path("v1", "p", "ml", "binding") == "/api/v1/namespaces/ml/pods/p/binding"
    assert NODES.collection_path("v1", "ml") == "/api/v1/nodes"  # cluster-scoped: no namespace
    kueue = TOPOLOGIES[2]
    assert (kueue.name, kueue.versions[0]) == ("topologies.kueue.x-k8s.io", "v1beta2")
    assert kueue.object_path("v1beta1", "dc") == "/apis/kueue.x-k8s.io/v1beta1/topologies/dc"
    with pytest.raises(ValueError, match="needs a namespace"):
        PODS.object_path("v1", "p")


def test_the_watched_table_names_each_resource_once_and_covers_the_grouper_kinds() -> None:
    names = [r.name for r in WATCHED]
    assert len(names) == len(set(names))
    kinds = {(r.group, r.kind) for r in WATCHED}
    for want in [
        ("", "Node"),
        ("", "Pod"),
        ("scheduling.k8s.io", "PriorityClass"),
        ("scheduling.topogang.io", "PodGroup"),
        ("scheduling.run.ai", "PodGroup"),
        ("kai.scheduler", "Topology"),
        ("kueue.x-k8s.io", "Topology"),
        ("scheduling.topogang.io", "ResourceInterface"),
        ("batch", "Job"),
        ("kubeflow.org", "MPIJob"),
        ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
        ("jobset.x-k8s.io", "JobSet"),
        ("ray.io", "RayJob"),
        ("grove.io", "PodCliqueSet"),
        ("grove.io", "PodCliqueScalingGroup"),
        ("grove.io", "PodClique"),
        ("scheduler.grove.io", "PodGang"),
    ]:
        assert want in kinds


# -- the API client's proxy ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("configured", "env", "expected"),
    [
        (None, {}, None),
        (None, {"HTTPS_PROXY": "http://proxy:3128"}, "http://proxy:3128"),
        (None, {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "10.0.0.1"}, None),
        ("http://kubeconfig-proxy:8080", {"HTTPS_PROXY": "http://proxy:3128"}, "http://kubeconfig-proxy:8080"),
    ],
)
async def test_the_api_clients_proxy_is_the_kubeconfigs_else_the_environments_unless_no_proxy_covers_the_host(
    monkeypatch: pytest.MonkeyPatch, configured: str | None, env: dict[str, str], expected: str | None
) -> None:
    from kubernetes_asyncio import client as k8s

    from extender.kube.client import KubeClient

    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    configuration = type.__call__(k8s.Configuration)
    configuration.host = "https://10.0.0.1:6443"
    configuration.proxy = configured
    async with KubeClient(k8s.ApiClient(configuration=configuration)) as client:
        assert client._proxy_for_host() == expected
        monkeypatch.setenv("HTTPS_PROXY", "http://changed:1")  # looked up once, not per request
        assert client._proxy_for_host() == expected


# -- the garbage collector held off while a list is applied -------------------------------------------


def test_collections_are_held_off_until_the_last_holder_leaves_and_what_was_made_is_then_old() -> None:
    assert gc.isenabled()
    with collections_held():
        assert not gc.isenabled()
        with collections_held():  # another informer's list, at the same time
            made = [[]]  # a container the collector tracks
        assert not gc.isenabled()
        assert any(o is made for o in gc.get_objects(generation=0))
    assert gc.isenabled()
    assert any(o is made for o in gc.get_objects(generation=2))  # moved there without a collection
    assert gc.get_freeze_count() == 0


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    try:
        with collections_held():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
