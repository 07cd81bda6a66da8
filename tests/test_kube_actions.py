"""KubeActions' two lanes: a gang's Bindings never queue behind best-effort writes.

The API server is a stand-in here whose best-effort writes (pods PATCHes, Events) hang until
released; e2e/test_kube_actions.py runs every write against the real kube-apiserver.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, cast

from extender.kube.actions import KubeActions
from extender.kube.client import KubeClient
from tests.kube_fakes import until


class Stalled:
    """Every PATCH hangs until `release` is set; POSTs of Bindings answer at once."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.patches = 0
        self.bindings: list[str] = []

    async def patch(self, path: str, body: Mapping[str, Any], **_: Any) -> dict[str, Any]:
        self.patches += 1
        await self.release.wait()
        return {}

    async def post(self, path: str, body: Mapping[str, Any], **_: Any) -> dict[str, Any]:
        self.bindings.append(path)
        return {}


async def test_a_binding_is_sent_while_every_best_effort_slot_is_taken() -> None:
    api = Stalled()
    actions = KubeActions(cast(KubeClient, api), concurrency=4)
    wakes = asyncio.ensure_future(actions.wake([("ml", f"p-{i}") for i in range(16)], 1))
    await until(lambda: api.patches == 4, "the best-effort lane to be full")  # twelve more wait behind it
    await asyncio.wait_for(actions.bind("ml", "g-0", "uid", "n1"), 5)
    assert api.bindings == ["/api/v1/namespaces/ml/pods/g-0/binding"]
    assert api.patches == 4  # still stuck
    api.release.set()
    await wakes
    assert api.patches == 16
