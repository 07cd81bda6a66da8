"""The informer's loop against a scripted API: list, watch, bookmarks, 410 relists, absent APIs,
retries and stopping. Watch bytes go through `watch_events`, the splitter KubeClient.watch uses,
so an ERROR 410 event takes the same path as one from a real API server (e2e tests do that too)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from structlog.testing import capture_logs

from extender.kube.backoff import Backoff
from extender.kube.client import ApiError
from extender.kube.informer import Informer
from extender.kube.resources import PODS, Resource
from tests.kube_fakes import Recorder, ScriptedApi, gone, line, pod, running, until

WIDGETS = Resource("example.com", ("v2", "v1"), "Widget", "widgets", namespaced=True)


def make(api: ScriptedApi, resource: Resource = PODS, **kwargs: Any) -> tuple[Informer, Recorder]:
    recorder = Recorder()
    kwargs.setdefault("backoff", Backoff(initial=0.01, cap=0.02))
    return Informer(api, resource, recorder, rand=lambda: 0.5, **kwargs), recorder


async def test_lists_then_watches_from_the_list_version_with_bookmarks() -> None:
    api = ScriptedApi(
        [([pod("a", "10"), pod("b", "11")], "12")],
        [
            [
                line("ADDED", pod("c", "13")),
                line("MODIFIED", pod("a", "14")),
                line("DELETED", pod("b", "15")),
                line("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "20"}}),
            ]
        ],
    )
    informer, seen = make(api, watch_seconds=100)
    assert not informer.synced
    async with running(informer):
        await until(lambda: len(api.watch_calls) == 2, "the second watch")
    assert seen.events == [
        ("ADDED", "a", "10"),
        ("ADDED", "b", "11"),
        ("ADDED", "c", "13"),
        ("MODIFIED", "a", "14"),
        ("DELETED", "b", "15"),
    ]
    assert (informer.synced, informer.settled, informer.installed) == (True, True, True)
    assert sorted(informer.keys()) == ["ml/a", "ml/c"]
    (path, first, timeout), (_, second, _) = api.watch_calls
    assert path == "/api/v1/pods"
    assert first == {"resourceVersion": "12", "allowWatchBookmarks": True}
    assert timeout == 150  # watch_seconds, stretched by the (fixed) jitter
    assert second["resourceVersion"] == "20"  # the bookmark's: the watch that ended is resumed, not relisted
    assert api.list_calls == ["/api/v1/pods"]
    assert informer.relists == 0
    assert api.closed == 2


async def test_an_error_410_in_the_watch_relists_and_reconciles() -> None:
    api = ScriptedApi(
        [
            ([pod("a", "10"), pod("b", "11"), pod("c", "12")], "12"),
            ([pod("b", "11"), pod("c", "30"), pod("d", "31")], "32"),
        ],
        [[line("MODIFIED", pod("a", "13")), gone("13")]],
    )
    informer, seen = make(api)
    with capture_logs() as logs:
        async with running(informer):
            await until(lambda: informer.relists == 1 and len(api.watch_calls) == 2, "the relist")
    assert seen.events[3:] == [
        ("MODIFIED", "a", "13"),
        ("DELETED", "a", "13"),
        ("MODIFIED", "c", "30"),
        ("ADDED", "d", "31"),
    ]
    assert api.watch_calls[1][1]["resourceVersion"] == "32"
    relisted = [e for e in logs if e["event"] == "relisted"]
    assert relisted == [
        {
            "event": "relisted",
            "log_level": "info",
            "resource": "pods",
            "reason": "410 Expired: too old resource version: 13",
            "objects": 3,
            "added": 1,
            "modified": 1,
            "deleted": 1,
            "seconds": relisted[0]["seconds"],
        }
    ]


async def test_a_410_status_on_the_watch_relists_too() -> None:
    expired = ApiError(410, "too old resource version: 5", reason="Expired", method="WATCH", path="/api/v1/pods")
    api = ScriptedApi([([pod("a", "5")], "5"), ([], "40")], [expired])
    informer, seen = make(api)
    async with running(informer):
        await until(lambda: informer.relists == 1, "the relist")
    assert seen.events == [("ADDED", "a", "5"), ("DELETED", "a", "5")]


async def test_an_api_that_is_not_installed_is_settled_reported_once_and_picked_up_later() -> None:
    missing = ApiError(404, "the server could not find the requested resource", reason="NotFound")
    api = ScriptedApi(
        [missing, missing, missing, missing, missing, missing, ([pod("w", "3")], "3")],
        [],
    )
    informer, seen = make(api, resource=WIDGETS, recheck_seconds=0.01)
    with capture_logs() as logs:
        async with running(informer):
            await until(lambda: informer.settled, "settled")
            assert (informer.installed, informer.synced) == (False, False)
            await until(lambda: informer.synced, "the CRD to appear")
    # each look tries every version, preferred first
    assert api.list_calls[:2] == ["/apis/example.com/v2/widgets", "/apis/example.com/v1/widgets"]
    assert (informer.installed, informer.version, informer.api_version) == (True, "v2", "example.com/v2")
    assert seen.events == [("ADDED", "w", "3")]
    messages = [e["event"] for e in logs]
    assert messages.count("resource not installed") == 1
    assert messages.count("resource installed") == 1


async def test_an_api_removed_while_watched_deletes_its_objects() -> None:
    missing = ApiError(404, "not found", reason="NotFound")
    api = ScriptedApi([([pod("w", "3"), pod("v", "4")], "4"), missing, missing], [missing])
    informer, seen = make(api, resource=WIDGETS, recheck_seconds=60)
    async with running(informer):
        await until(lambda: informer.installed is False, "the API to go")
    assert sorted(seen.events[2:]) == [("DELETED", "v", "4"), ("DELETED", "w", "3")]
    assert informer.keys() == []


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(ApiError(500, "etcdserver: leader changed"), id="status-500"),
        pytest.param(aiohttp.ClientConnectionError("connection refused"), id="connection"),
        pytest.param(TimeoutError(), id="timeout"),
    ],
)
async def test_transient_errors_back_off_and_retry(failure: Exception) -> None:
    api = ScriptedApi([failure, failure, ([pod("a", "1")], "1")], [failure, [line("ADDED", pod("b", "2"))]])
    informer, seen = make(api)
    with capture_logs() as logs:
        async with running(informer):
            await until(lambda: len(seen.events) == 2, "both pods")
    assert seen.events == [("ADDED", "a", "1"), ("ADDED", "b", "2")]
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["list failed; retrying"] * 2 + [
        "watch failed; retrying"
    ]
    assert informer.relists == 0  # a failed watch resumes from its resourceVersion


async def test_a_handler_that_raises_is_logged_and_the_informer_goes_on() -> None:
    api = ScriptedApi([([pod("bad", "1"), pod("good", "2")], "2")], [])
    got: list[str] = []

    def handler(event_type: str, obj: dict[str, Any]) -> None:
        if obj["metadata"]["name"] == "bad":
            raise KeyError("boom")
        got.append(obj["metadata"]["name"])

    informer = Informer(api, PODS, handler)
    with capture_logs() as logs:
        async with running(informer):
            await until(lambda: informer.synced, "synced")
    assert got == ["good"]
    assert [(e["event"], e["object"]) for e in logs if e["log_level"] == "error"] == [("handler failed", "ml/bad")]


async def test_stopping_closes_the_watch_and_a_restart_resumes_from_the_version_reached() -> None:
    api = ScriptedApi([([pod("a", "1")], "7")], [])
    informer, _ = make(api)
    async with running(informer) as task:
        await until(lambda: len(api.watch_calls) == 1, "the watch")
    assert task.cancelled()
    assert api.closed == 1
    async with running(informer):
        await until(lambda: len(api.watch_calls) == 2, "the second watch")
    assert api.list_calls == ["/api/v1/pods"]
    assert api.watch_calls[1][1]["resourceVersion"] == "7"


async def test_a_list_is_applied_in_slices_and_synced_and_watched_only_once_all_of_it_is() -> None:
    listed = [pod(f"p{i:02}", str(i)) for i in range(30)]
    api = ScriptedApi([(listed, "30")], [])
    informer, seen = make(api, slice_seconds=0)  # a slice is one step: the loop runs between any two
    states: list[tuple[int, bool, int]] = []  # (events applied, synced, watches), as another task saw them

    async def look() -> None:
        while not informer.synced:
            states.append((len(seen.events), informer.synced, len(api.watch_calls)))
            await asyncio.sleep(0)

    async with running(informer):
        await asyncio.gather(look(), until(lambda: len(api.watch_calls) == 1, "the watch"))
    assert seen.events == [("ADDED", f"p{i:02}", str(i)) for i in range(30)]
    partial = [s for s in states if 0 < s[0] < 30]
    assert len(partial) >= 10  # other tasks ran while the list was being applied...
    assert {(synced, watches) for _, synced, watches in states} == {(False, 0)}  # ...not synced, no watch yet


async def test_a_relist_in_slices_keeps_its_order_and_resumes_the_watch_only_after_it() -> None:
    api = ScriptedApi(
        [
            ([pod("a", "1"), pod("b", "2"), pod("c", "3")], "3"),
            ([pod("c", "9"), pod("d", "10"), pod("b", "2", uid="b2"), pod("e", "11")], "12"),
        ],
        [[gone("3")]],
    )
    informer, seen = make(api, slice_seconds=0)
    states: list[tuple[int, int, int]] = []  # (events, relists, watches)

    async def look() -> None:
        while informer.relists == 0 or len(api.watch_calls) < 2:
            states.append((len(seen.events), informer.relists, len(api.watch_calls)))
            await asyncio.sleep(0)

    async with running(informer):
        await asyncio.wait_for(look(), 5)
    assert seen.events[3:] == [
        ("DELETED", "a", "1"),  # what went first, then the list in its order
        ("MODIFIED", "c", "9"),
        ("ADDED", "d", "10"),
        ("DELETED", "b", "2"),  # recreated under the same name: the old one goes, the new one comes
        ("ADDED", "b", "2"),
        ("ADDED", "e", "11"),
    ]
    during = [s for s in states if 3 < s[0] < 9]
    assert during, "nothing ran while the relist was applied"
    assert {(relists, watches) for _, relists, watches in during} == {(0, 1)}
    assert api.watch_calls[1][1]["resourceVersion"] == "12"
    assert sorted(informer.keys()) == ["ml/b", "ml/c", "ml/d", "ml/e"]


class Holding(Recorder):
    """A handler that holds keys of its own too (as the core holds pods learnt ahead of the watch)."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: dict[str, int] = {}
        self.count = 0

    def __call__(self, event_type: str, obj: dict[str, Any]) -> None:
        super().__call__(event_type, obj)
        if event_type == "DELETED":
            self.keys.pop(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}", None)

    def add(self, key: str) -> None:
        self.count += 1
        self.keys[key] = self.count

    def mark(self) -> int:
        return self.count

    def held_before(self, mark: int) -> Iterator[str]:
        return iter([k for k, n in self.keys.items() if n <= mark])


async def test_what_the_handler_side_held_before_a_list_and_the_list_lacks_is_deleted_after_it() -> None:
    api = ScriptedApi([([pod("a", "1")], "1"), ([pod("a", "1")], "5")], [])
    held = Holding()
    held.add("ml/ghost")  # known before the first list, which does not have it
    informer = Informer(api, PODS, held, held=held, backoff=Backoff(initial=0.01, cap=0.02), rand=lambda: 0.5)
    async with running(informer):
        await until(lambda: len(api.watch_calls) == 1, "the watch")
        assert held.events == [("ADDED", "a", "1"), ("DELETED", "ghost", "")]
        held.add("ml/ghost-2")  # known while watching, gone before the next relist
        api.add_watch([gone("1")])
        await until(lambda: informer.relists == 1, "the relist")
    assert held.events[2:] == [("DELETED", "ghost-2", "")]
    assert held.keys == {}


async def test_managed_fields_are_dropped_as_list_pages_and_watch_events_arrive() -> None:
    managed = [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:metadata": {"f:labels": {}}}}]

    def with_fields(name: str, rv: str) -> dict[str, Any]:
        body = pod(name, rv)
        body["metadata"]["managedFields"] = managed
        return body

    api = ScriptedApi([([with_fields("a", "1")], "1")], [[line("ADDED", with_fields("b", "2"))]])
    got: list[dict[str, Any]] = []
    informer = Informer(api, PODS, lambda _, obj: got.append(obj), rand=lambda: 0.5)
    async with running(informer):
        await until(lambda: len(got) == 2, "both pods")
    assert [sorted(o["metadata"]) for o in got] == [["name", "namespace", "resourceVersion", "uid"]] * 2


async def test_the_garbage_collector_is_held_off_while_a_list_is_fetched_and_applied() -> None:
    collecting: list[bool] = []
    api = ScriptedApi([([pod("a", "1"), pod("b", "2")], "2")], [])
    informer = Informer(api, PODS, lambda *_: collecting.append(gc.isenabled()), slice_seconds=0)
    async with running(informer):
        await until(lambda: len(api.watch_calls) == 1, "the watch")
        assert gc.isenabled()
    assert collecting == [False, False]
