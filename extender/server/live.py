"""A GangScheduler over a live cluster, synced once: what `topogang explain` reads."""

from __future__ import annotations

import os

from extender.core.cluster import ClusterState
from extender.core.scheduler import GangScheduler
from extender.kube.cache import ClusterCache
from extender.kube.client import KubeClient


async def synced_scheduler(kubeconfig: str | None, seconds: float) -> GangScheduler:
    """List every watched resource once (no planning, no writes) and return the view."""
    path = kubeconfig or os.environ.get("KUBECONFIG") or None
    scheduler = GangScheduler(ClusterState())
    async with await KubeClient.connect(path) as client:
        cache = ClusterCache(client, scheduler)
        async with cache:
            await cache.wait_ready(seconds)
    return scheduler
