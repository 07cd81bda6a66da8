"""`topogang explain` over a simulation input: the tree, constraints, counts, where, and why not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from extender.cli import main

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "examples" / "cluster-64.yaml"
HUGE = """
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: huge
  namespace: ml
  annotations: {kai.scheduler/topology: default, kai.scheduler/topology-required-placement: block}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 24
      template:
        metadata:
          annotations: {kai.scheduler/segment-size: "8", kai.scheduler/segment-topology-required-placement: rack}
        spec: {containers: [{name: t, resources: {requests: {nvidia.com/gpu: "8"}}}]}
"""


@pytest.fixture(autouse=True)
def structlog_defaults() -> Iterator[None]:
    """`explain` configures logging for its process; the next tests get structlog's defaults."""
    yield
    structlog.reset_defaults()


def test_a_placed_workload_shows_where_each_scope_landed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "default/distributed-training", "-f", str(ROOT / "examples" / "tfjob-segments")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("default/tfjob-distributed-training  (TFJob default/distributed-training)  Scheduled\n")
    assert "PodGroup default/tfjob-distributed-training: min 3 of 3 SubGroups; required zone" in out
    assert "; 19 / 19 / 19; on zone z1" in out
    assert "SubGroup worker-seg-0: min 4 pods; required rack" in out
    assert "Planning it now: nothing to plan: every pod is bound" in out


def test_a_pending_workload_says_why_and_which_nodes_are_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "huge.yaml").write_text(HUGE)
    assert main(["explain", "ml/huge", "-f", str(CLUSTER), "-f", str(tmp_path / "huge.yaml")]) == 0
    out = capsys.readouterr().out
    assert "ml/tfjob-huge  (TFJob ml/huge)  Pending" in out
    assert "SubGroup worker-seg-2: min 8 pods; required rack" in out
    assert "; 8 / 0 / 0" in out
    assert (
        "Planning it now: does not fit: PodGroup ml/tfjob-huge: 24 pods x {nvidia.com/gpu: 8} in one block; "
        "the best block fits 16; nodes left out: 5 nvidia.com/gpu, 1 not ready or cordoned"
    ) in out
    assert "Nodes left out for pods of {nvidia.com/gpu: 8}: 5 nvidia.com/gpu, 1 not ready or cordoned" in out


def test_an_unknown_name_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "ml/nothing", "-f", str(CLUSTER)]) == 1
    assert "no gang named ml/nothing" in capsys.readouterr().err


def test_a_gang_never_tried_is_headlined_by_the_dry_runs_reason(tmp_path: Path) -> None:
    """What `explain` sees on a live cluster: a fresh scheduler that has planned nothing. The
    headline is the dry run's reason, not "waiting to be planned"."""
    from extender.core.explain import explain
    from extender.simulate.loader import load
    from extender.simulate.runner import Simulation

    (tmp_path / "huge.yaml").write_text(HUGE)
    fresh = Simulation(load([str(CLUSTER), str(tmp_path / "huge.yaml")]))  # loaded, never run
    e = explain(fresh.scheduler, "ml/tfjob-huge")
    assert e.phase == "Pending"
    assert e.message.startswith("does not fit: PodGroup ml/tfjob-huge: 24 pods x {nvidia.com/gpu: 8} in one block;")
    assert "waiting to be planned" not in e.message


def test_logs_go_to_stderr_and_stdout_is_the_explanation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "default/distributed-training", "-f", str(ROOT / "examples" / "tfjob-segments")]) == 0
    structlog.get_logger("topogang").warning("a log line")  # as configured by explain
    captured = capsys.readouterr()
    assert captured.out.startswith("default/tfjob-distributed-training  ")
    assert "a log line" in captured.err
    assert "a log line" not in captured.out


# -- times ---------------------------------------------------------------------------------------

UNTIMED = """
apiVersion: scheduling.topogang.io/v1alpha1
kind: Topology
metadata: {name: dc}
spec:
  levels: [{nodeLabel: zone}, {nodeLabel: rack}]
---
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {zone: z1, RACK1 kubernetes.io/hostname: n1}}
status: {allocatable: {nvidia.com/gpu: "8", cpu: "64", pods: "110"}}
---
apiVersion: v1
kind: Node
metadata: {name: n2, labels: {zone: z1, RACK1 kubernetes.io/hostname: n2}}
status: {allocatable: {nvidia.com/gpu: "8", cpu: "64", pods: "110"}}
---
apiVersion: v1
kind: Pod
metadata: {name: running, namespace: ml}
spec:
  nodeName: n1
  activeDeadlineSeconds: 3600
  containers: [{name: c, resources: {requests: {nvidia.com/gpu: "8"}}}]
status: {phase: Running}
---
apiVersion: scheduling.topogang.io/v1alpha1
kind: PodGroup
metadata: {name: big, namespace: ml, annotations: {kai.scheduler/topology: dc}}
spec: {minMember: 2, topologyConstraints: {global: {requiredTopologyLevel: rack}}}
---
apiVersion: v1
kind: Pod
metadata: {name: big-0, namespace: ml, annotations: {pod-group-name: big}}
spec:
  containers: [{name: c, resources: {requests: {nvidia.com/gpu: "8"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: big-1, namespace: ml, annotations: {pod-group-name: big}}
spec:
  containers: [{name: c, resources: {requests: {nvidia.com/gpu: "8"}}}]
"""


def test_an_input_without_times_shows_no_1970(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The input has no creation or start time: there is no wall clock, and the room held says so
    (and how long after the last pass it should start) instead of dating it 1970-01-01."""
    (tmp_path / "in.yaml").write_text(UNTIMED.replace("RACK1", "rack: r1,"))
    assert main(["explain", "ml/big", "-f", str(tmp_path / "in.yaml")]) == 0
    out = capsys.readouterr().out
    assert "1970" not in out
    assert (
        "\n  Reservation: room held for it in rack z1/r1 (2 nodes), since a moment not known (no wall clock);"
        " expected to start 1h0m after the last reservation pass\n"
    ) in out


def test_a_gang_whose_nodes_lack_its_level_label_holds_no_room(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "in.yaml").write_text(UNTIMED.replace("RACK1", ""))
    assert main(["explain", "ml/big", "-f", str(tmp_path / "in.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1] == "  PodGroup ml/big: 2 pods x {nvidia.com/gpu: 8} in one rack; no node has label rack"
    assert "Reservation" not in out
    assert "room held" not in out
