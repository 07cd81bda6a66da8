"""Every example in examples/ runs through `topogang simulate` and places what it promises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from extender.cli import main

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "examples" / "cluster-64.yaml"
_FOLDER = ROOT / "examples" / "workloads"
# A file per workload, or a folder for one that comes with the objects its operator creates (Grove)
WORKLOADS = sorted([*_FOLDER.glob("*.yaml"), *(p for p in _FOLDER.iterdir() if p.is_dir())])


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


def test_two_elastic_jobs_that_arrive_together_both_start_their_minimum(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "-f", str(ROOT / "examples" / "elastic"), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {g["name"]: g["phase"] for g in doc["podGroups"]} == {
        "pytorchjob-first": "Scheduled",
        "pytorchjob-second": "Scheduled",
    }
    placed: dict[str, list[str]] = {}
    for p in doc["pods"]:
        if p["node"]:
            placed.setdefault(p["name"].split("-")[0], []).append(p["node"])
    assert {job: len(nodes) for job, nodes in placed.items()} == {"first": 4, "second": 4}
    assert len({n for nodes in placed.values() for n in nodes}) == 8


def test_a_higher_priority_gang_preempts_the_cheapest_gang_in_the_simulation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", "-f", str(ROOT / "examples" / "preemption"), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    victims = sorted((v["name"], v["preemptedBy"], v["domain"]) for v in doc["preempted"])
    assert victims == [(f"small-{i}", "ml/urgent", "rack z1/b1/r3") for i in range(4)]
    assert {p["name"]: p["node"] for p in doc["pods"]} == {f"urgent-{i}": f"gpu-r3-{i + 1}" for i in range(4)}


def test_a_block_gang_has_three_movable_pods_moved_in_the_simulation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "-f", str(ROOT / "examples" / "defrag"), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    moved = sorted((v["name"], v["preemptedBy"], v["domain"], v["movedTo"]) for v in doc["preempted"])
    assert moved == [(f"infer-{i}-x7k2p", "ml/train", "block z1/b1", "gpu-b2-r1-1") for i in range(3)]
    nodes = {p["name"]: p["node"] for p in doc["pods"]}
    assert {nodes[f"train-{i}"] for i in range(3)} == {"gpu-b1-r1-1", "gpu-b1-r2-1", "gpu-b1-r3-1"}
    assert {nodes[f"infer-{i}-x7k2p-moved"] for i in range(3)} == {"gpu-b2-r1-1"}  # the room held for each


def test_a_gang_no_eviction_helps_preempts_nobody_in_the_simulation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    urgent = (ROOT / "examples" / "preemption" / "20-urgent.yaml").read_text()
    (tmp_path / "20-urgent.yaml").write_text(urgent.replace("minMember: 4", "minMember: 5", 1) + _fifth_pod())
    for name in ("00-cluster.yaml", "10-running.yaml"):
        (tmp_path / name).write_text((ROOT / "examples" / "preemption" / name).read_text())
    assert main(["simulate", "-f", str(tmp_path), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["preempted"] == []
    (urgent_group,) = [g for g in doc["podGroups"] if g["name"] == "urgent"]
    assert urgent_group["phase"] == "Pending"


def _fifth_pod() -> str:
    return """---
apiVersion: v1
kind: Pod
metadata:
  name: urgent-4
  namespace: ml
  annotations:
    pod-group-name: urgent
spec:
  priorityClassName: high
  containers:
  - name: main
    image: trainer
    resources:
      requests:
        nvidia.com/gpu: '8'
        cpu: '8'
      limits:
        nvidia.com/gpu: '8'
"""


def test_the_dra_example_is_story_2_with_gpus_from_claims(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "-f", str(ROOT / "examples" / "dra"), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    workers = [p for p in doc["pods"] if p["subGroup"].startswith("worker-seg-")]
    assert len(workers) == 16
    assert len({p["node"] for p in workers}) == 16  # 8 devices each: one worker per node
    segments: dict[str, set[str]] = {}
    for p in workers:
        segments.setdefault(p["subGroup"], set()).add(p["node"].rsplit("-", 1)[0])
    assert all(len(racks) == 1 for racks in segments.values())
    assert len({r.split("-")[1] for racks in segments.values() for r in racks}) == 1


def test_the_reservation_example_shows_the_room_held_and_the_estimated_start(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", "-f", str(ROOT / "examples" / "reservation"), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (group,) = doc["podGroups"]
    assert group["phase"] == "Pending"
    assert "room held for it in rack z1/r1 (2 nodes)" in group["message"]
    assert "expected to start by 2026-11-25T11:00:00Z" in group["message"]  # 10:00 + activeDeadlineSeconds
