"""LeaderLabel against an in-memory Pod with merge-patch semantics: the label follows leadership,
failures are retried with backoff (one log line each), a stale label is removed at start, the
caller never waits for the API server, and shutdown removes the label within its time limit."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any

from extender.kube.backoff import Backoff
from extender.kube.client import ApiError
from extender.kube.leader_label import LEADER_LABEL, LeaderLabel
from tests.kube_fakes import until

PATH = "/api/v1/namespaces/topogang-system/pods/topogang-a"


class Pod:
    """One Pod object as the API server keeps it; records every request."""

    def __init__(self, labels: dict[str, str] | None = None, *, exists: bool = True) -> None:
        self.labels = {"app.kubernetes.io/name": "topogang", **(labels or {})}
        self.exists = exists
        self.calls: list[tuple[str, Any]] = []
        self.failures: list[Exception] = []  # raised by the next requests, in order
        self.hold: asyncio.Event | None = None  # when set, requests wait for it

    async def _request(self, method: str, body: Any = None) -> None:
        self.calls.append((method, copy.deepcopy(body)))
        if self.hold is not None:
            await self.hold.wait()
        await asyncio.sleep(0)
        if self.failures:
            raise self.failures.pop(0)
        if not self.exists:
            raise ApiError(404, 'pods "topogang-a" not found', reason="NotFound")

    async def get(self, path: str) -> dict[str, Any]:
        assert path == PATH
        await self._request("GET")
        return {"metadata": {"name": "topogang-a", "labels": dict(self.labels)}}

    async def patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        assert path == PATH
        await self._request("PATCH", body)
        for key, value in body["metadata"]["labels"].items():  # a JSON merge patch: null deletes
            if value is None:
                self.labels.pop(key, None)
            else:
                self.labels[key] = value
        return {"metadata": {"name": "topogang-a", "labels": dict(self.labels)}}

    @property
    def leader(self) -> bool:
        return self.labels.get(LEADER_LABEL) == "true"


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def _say(self, level: str, event: str, **kw: Any) -> None:
        self.lines.append((level, event, kw))

    def debug(self, event: str, **kw: Any) -> None:
        self._say("debug", event, **kw)

    def info(self, event: str, **kw: Any) -> None:
        self._say("info", event, **kw)

    def warning(self, event: str, **kw: Any) -> None:
        self._say("warning", event, **kw)

    def events(self, level: str | None = None) -> list[str]:
        return [e for lvl, e, _ in self.lines if level in (None, lvl)]


SET = ("PATCH", {"metadata": {"labels": {LEADER_LABEL: "true"}}})
REMOVE = ("PATCH", {"metadata": {"labels": {LEADER_LABEL: None}}})
GET = ("GET", None)


def label(pod: Pod, *, cap: float = 0.05, namespace: str | None = "topogang-system") -> tuple[LeaderLabel, Log]:
    log = Log()
    backoff = Backoff(initial=0.01, cap=cap, rand=lambda: 0.0)
    return LeaderLabel(pod, namespace, "topogang-a", backoff=backoff, log=log), log  # type: ignore[arg-type]


async def settled(lbl: LeaderLabel) -> None:
    await until(lambda: lbl.labelled == lbl.wanted, "the label to settle")


async def test_the_label_follows_leadership_one_log_line_per_change() -> None:
    pod = Pod()
    lbl, log = label(pod)
    lbl.start()
    await settled(lbl)
    assert pod.calls == [GET]  # a follower that finds no label writes nothing
    lbl.want(True)
    await settled(lbl)
    assert pod.leader
    lbl.want(False)
    await settled(lbl)
    assert LEADER_LABEL not in pod.labels
    assert pod.labels == {"app.kubernetes.io/name": "topogang"}  # nothing else touched
    assert pod.calls == [GET, SET, REMOVE]
    assert log.events("info") == ["leader label set", "leader label removed"]
    await lbl.close()
    assert pod.calls == [GET, SET, REMOVE]  # already removed: close writes nothing


async def test_a_follower_removes_a_label_left_by_a_crashed_leader_of_its_pod() -> None:
    pod = Pod({LEADER_LABEL: "true"})
    lbl, log = label(pod)
    lbl.start()
    await settled(lbl)
    assert not pod.leader
    assert pod.calls == [GET, REMOVE]
    assert [(e, kw["stale"]) for lvl, e, kw in log.lines if lvl == "info"] == [("leader label removed", True)]
    await lbl.close()


async def test_failures_are_retried_with_backoff_one_warning_each() -> None:
    pod = Pod()
    lbl, log = label(pod)
    lbl.start()
    await settled(lbl)
    pod.failures = [ApiError(503, "unavailable"), ApiError(500, "etcd timeout"), OSError("connection reset")]
    lbl.want(True)
    await settled(lbl)
    assert pod.leader
    assert pod.calls == [GET, SET, SET, SET, SET]
    warnings = [kw for lvl, _, kw in log.lines if lvl == "warning"]
    assert [w["retry_in"] for w in warnings] == [0.01, 0.02, 0.04]  # doubling (no jitter here)
    assert "etcd timeout" in warnings[1]["error"]
    assert warnings[2]["error"] == "connection reset"
    assert all(w["leader"] is True for w in warnings)
    assert lbl.failures == 3
    assert lbl.backoff.failures == 0  # reset by the success
    assert log.events("info") == ["leader label set"]
    await lbl.close()


async def test_the_caller_never_waits_for_the_api_server() -> None:
    pod = Pod()
    lbl, _ = label(pod)
    lbl.start()
    await settled(lbl)
    pod.hold = asyncio.Event()  # the API server hangs
    lbl.want(True)  # returns at once: nothing awaited
    await until(lambda: len(pod.calls) == 2, "the patch to be sent")
    assert not pod.leader
    lbl.want(False)  # lost the Lease while the patch was in flight
    pod.hold.set()
    await settled(lbl)
    assert pod.calls[-2:] == [SET, REMOVE]  # the label does not outlive the term
    assert not pod.leader


async def test_a_change_of_mind_during_a_backoff_goes_at_once() -> None:
    pod = Pod()
    lbl, log = label(pod, cap=60)
    lbl.backoff.initial = 60.0  # a retry would come much later than this test lasts
    lbl.start()
    await settled(lbl)
    pod.failures = [ApiError(503, "unavailable")]
    lbl.want(True)
    await until(lambda: log.events("warning") != [], "the failed patch")
    lbl.want(False)
    await settled(lbl)
    # The failed patch may have landed: the state is unknown, so the pod is read again.
    assert pod.calls == [GET, SET, GET]
    await lbl.close()


async def test_shutdown_removes_the_label_before_returning() -> None:
    pod = Pod()
    lbl, log = label(pod)
    lbl.start()
    lbl.want(True)
    await settled(lbl)
    assert pod.leader
    await lbl.close()
    assert not pod.leader
    assert log.events("info") == ["leader label set", "leader label removed"]
    assert lbl._task is None


async def test_shutdown_with_the_api_server_down_gives_up_after_its_time_limit() -> None:
    pod = Pod()
    lbl, log = label(pod)
    lbl.start()
    lbl.want(True)
    await settled(lbl)
    pod.failures = [ApiError(503, "unavailable")] * 1000
    loop = asyncio.get_running_loop()
    started = loop.time()
    await lbl.close(seconds=0.2)
    assert loop.time() - started < 1.0
    assert pod.leader  # could not remove it: the pod's replacement (or its next start) will
    assert log.events()[-1] == "leader label not removed before shutdown"


async def test_a_missing_pod_has_no_label_to_remove_but_setting_one_is_retried() -> None:
    pod = Pod(exists=False)
    lbl, log = label(pod)
    lbl.start()
    await settled(lbl)
    assert (pod.calls, log.events("warning")) == ([GET], [])
    lbl.want(True)
    await until(lambda: len(log.events("warning")) >= 2, "two failed patches")
    assert "404" in log.lines[-1][2]["error"]
    pod.exists = True
    await settled(lbl)
    assert pod.leader
    await lbl.close()
    assert not pod.leader


async def test_without_a_pod_name_or_namespace_nothing_is_sent() -> None:
    pod = Pod()
    lbl, log = label(pod, namespace=None)
    lbl.start()
    lbl.want(True)
    await asyncio.sleep(0.05)
    lbl.want(False)
    await lbl.close()
    assert pod.calls == []
    assert log.events() == ["POD_NAME or POD_NAMESPACE unset: no pod to mark with the leader label"]
    assert log.lines[0][0] == "debug"
