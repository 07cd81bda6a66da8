"""Every example in examples/ runs through `topogang simulate` and places what it promises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from extender.cli import main

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "examples" / "cluster-64.yaml"
WORKLOADS = sorted((ROOT / "examples" / "workloads").glob("*.yaml"))


@pytest.mark.parametrize("path", WORKLOADS, ids=[p.stem for p in WORKLOADS])
def test_each_workload_example_groups_and_places_whole(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "-f", str(CLUSTER), "-f", str(path), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["podGroups"], "the workload forms at least one gang"
    for group in doc["podGroups"]:
        assert group["phase"] == "Scheduled", group
    assert all(p["node"] for p in doc["pods"]), [p["name"] for p in doc["pods"] if not p["node"]]


def test_the_demo_is_story_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "-f", str(ROOT / "examples" / "tfjob-segments"), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    segments: dict[str, set[str]] = {}
    for p in doc["pods"]:
        if p["subGroup"].startswith("worker-seg-"):
            segments.setdefault(p["subGroup"], set()).add(p["node"].rsplit("-", 1)[0])
    assert sorted(segments) == [f"worker-seg-{i}" for i in range(4)]
    assert all(len(racks) == 1 for racks in segments.values())
    zones = {r.split("-")[1] for racks in segments.values() for r in racks}
    assert len(zones) == 1
