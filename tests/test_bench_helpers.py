"""The pure parts of the kwok benchmarks' helpers (bench/kwok_cluster.py): the node shape, the
domains a gang landed in, and reading Prometheus samples."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from bench.kwok_cluster import Shape, diff, domains_per_group, kwok_tuning, prometheus_values


def test_shape_fills_rack_by_rack_and_the_last_rack_is_short() -> None:
    racks = Shape(rack_nodes=4, block_racks=2, zone_blocks=2).racks(19)
    assert racks == [
        (0, 0, 0, 4),
        (0, 0, 1, 4),
        (0, 1, 0, 4),
        (0, 1, 1, 4),
        (1, 0, 0, 3),
    ]
    assert sum(n for *_, n in racks) == 19


def test_default_shape_has_256_gpu_racks_1024_gpu_blocks_and_4096_gpu_zones() -> None:
    shape = Shape()
    assert [shape.gpus(level) for level in ("rack", "block", "zone")] == [256, 1024, 4096]
    assert shape.smallest_level(256) == "rack"
    assert shape.smallest_level(257) == "block"
    assert shape.smallest_level(4096) == "zone"
    with pytest.raises(ValueError, match="4097 GPUs do not fit in one zone of 4096"):
        shape.smallest_level(4097)


def test_domains_per_group_counts_distinct_label_values_of_each_groups_nodes() -> None:
    labels = {"n1": {"rack": "r1"}, "n2": {"rack": "r1"}, "n3": {"rack": "r2"}}
    bound = {"gang0-0": (1.0, "n1"), "gang0-1": (1.1, "n2"), "gang1-0": (1.2, "n1"), "gang1-1": (1.3, "n3")}
    assert domains_per_group(bound, labels, "rack") == {"gang0": 1, "gang1": 2}


def test_prometheus_values_keeps_wanted_samples_and_diff_drops_unchanged_ones() -> None:
    text = "\n".join(
        [
            "# HELP scheduler_schedule_attempts_total attempts",
            'scheduler_schedule_attempts_total{profile="default-scheduler",result="scheduled"} 12',
            'scheduler_schedule_attempts_total{profile="default-scheduler",result="error"} 0',
            "go_goroutines 40",
        ]
    )
    values = prometheus_values(text, ["scheduler_schedule_attempts_total"])
    assert values == {
        'scheduler_schedule_attempts_total{profile="default-scheduler",result="scheduled"}': 12.0,
        'scheduler_schedule_attempts_total{profile="default-scheduler",result="error"}': 0.0,
    }
    assert diff({"a": 5.0, "b": 1.0}, {"a": 2.0, "b": 1.0}) == {"a": 3.0}


def test_kwok_tuning_is_nothing_by_default_and_stretches_the_node_monitor_with_the_lease() -> None:
    assert kwok_tuning(0, 0) == {}
    flags = kwok_tuning(600, 0)
    assert flags["kwok"] == ["--node-lease-duration-seconds=600"]
    # a node is not called unreachable before two of its (longer) leases have gone unrenewed
    assert flags["kube-controller-manager"] == [
        "--node-monitor-grace-period=1200s",
        "--node-startup-grace-period=1200s",
    ]


def test_kwok_tuning_writes_its_worker_counts_to_a_config_file_kwok_loads() -> None:
    flags = kwok_tuning(0, 16)
    assert list(flags) == ["kwok"]
    (config,) = flags["kwok"]
    doc = orjson.loads(Path(config.removeprefix("--config=")).read_bytes())
    assert doc["kind"] == "KwokConfiguration"
    assert doc["options"] == {"nodePlayStageParallelism": 16, "nodeLeaseParallelism": 16, "podPlayStageParallelism": 16}
