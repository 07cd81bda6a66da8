"""The chaos soak of bench/soak.py, one minute of it: gangs of mixed shapes arrive while
topogang is killed (SIGKILL and SIGTERM) and restarted, rolled out while a gang runs degraded,
kube-scheduler restarts, nodes are cordoned, deleted and added back, pods deleted, and topogang's
API server is restarted (etcd too), throttled, slowed or its pod watch expired; no gang may run
below its minimum beyond a crash's or a fault's bind window, no gang that ran whole may be
evicted by a new leader, no required constraint may break, nothing may stay reserved after the
drain and nothing that fits may stay pending. `python bench/soak.py` runs the ten-minute
version.

It starts a control plane of its own (the soak restarts kube-scheduler and owns every node)."""

from __future__ import annotations

import asyncio

import pytest

from bench import soak

pytestmark = [pytest.mark.controlplane, pytest.mark.controlplane_only]


def test_a_minute_of_chaos_leaves_no_partial_gang_no_leak_and_nothing_stuck() -> None:
    args = soak.parser().parse_args(
        ["--minutes", "1", "--nodes", "64", "--settle", "30", "--seed", "82", "--chaos-every", "2", "5"]
    )
    counts = asyncio.run(soak.main_async(args))
    assert counts.gangs_completed > 0, counts
    # An API-server restart or a topogang restart can take 10-25 s of the minute on a loaded machine.
    assert sum(counts.chaos.values()) >= 2, counts.chaos
    assert counts.partial_gang_seconds == 0, counts.partial
    assert counts.kept_evicted == 0, counts.evicted
    assert counts.broken_constraints == 0, counts.broken
    assert counts.leaked_reservations == 0, counts
    assert counts.stuck_pods == 0, counts
    # Seed 82's chaos opens with a kube-apiserver restart, then a rollout; every fault is reported.
    assert counts.faults["apiserver"]["injected"] >= 1, counts.faults
    assert set(counts.faults) <= set(soak.API_FAULTS), counts.faults
