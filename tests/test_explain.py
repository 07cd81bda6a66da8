"""`topogang explain` over a simulation input: the tree, constraints, counts, where, and why not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import structlog

from extender.cli import main
from extender.core.cluster import ClusterState
from extender.core.explain import explain
from extender.core.explain_why import Why, why_lines
from extender.core.scheduler import GangScheduler
from extender.model.node import NodeInfo
from tests.builders import TOPO, grid, node, pod, podgroup

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
        "the best block fits 16 even with nothing running; nodes left out: 1 not ready or cordoned"
    ) in out
    assert "Nodes left out for pods of {nvidia.com/gpu: 8}: 5 nvidia.com/gpu, 1 not ready or cordoned" in out


def test_an_unknown_name_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "ml/nothing", "-f", str(CLUSTER)]) == 1
    assert "no gang named ml/nothing" in capsys.readouterr().err


def test_a_gang_never_tried_is_headlined_by_the_dry_runs_reason(tmp_path: Path) -> None:
    """What `explain` sees on a live cluster: a fresh scheduler that has planned nothing. The
    headline is the dry run's reason, not "waiting to be planned"."""
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


# -- why a placed gang is where it is ------------------------------------------------------------

PREEMPTION = ROOT / "examples" / "preemption"


def test_a_placed_gang_says_why_it_went_there_in_the_planners_own_terms(capsys: pytest.CaptureFixture[str]) -> None:
    """Each constrained level and the default compactness: the domain chosen, what it was ranked
    against and what the runner-up lacked (the keys of placement/candidates.py)."""
    assert main(["explain", "default/distributed-training", "-f", str(ROOT / "examples" / "tfjob-segments")]) == 0
    out = capsys.readouterr().out
    shape = "{cpu: 16, memory: 128Gi, nvidia.com/gpu: 8}"
    why = out[out.index("  Why there") :]
    assert why.splitlines()[:3] == [
        "  Why there (planned again now, its own pods' room given back, it goes where it is):",
        "    PodGroup default/tfjob-distributed-training, required zone: zone z1, ranked 1st of 2 zones in the cluster"
        f" with room for its minimum (16 pods x {shape}); runner-up zone z2: it would leave room for 16 more pods,"
        " zone z1 for 0 (the tightest fit first) (counted in whole parts; pod by pod 32 and 26)",
        "    PodGroup default/tfjob-distributed-training, compactness (no preference written): no node, rack or block"
        f" of zone z1 has room for its minimum (16 pods x {shape}): spread over zone z1",
    ]
    assert (
        f"    SubGroup worker-seg-0, required rack: rack z1/b1/r1, ranked 1st of 4 racks in zone z1 with room for its"
        f" minimum (4 pods x {shape}); runner-up rack z1/b1/r2: rack z1/b1/r1 was allotted to it with the siblings"
        " that ask for the same: the fewest racks for them all (the most room first, the last the tightest)\n"
    ) in why
    assert (
        f"    SubGroup worker-seg-3, required rack: rack z1/b2/r2, the only rack in zone z1 with room for its minimum"
        f" (4 pods x {shape}); 3 other racks had less room\n"
    ) in why


def _scheduler(nodes: list[NodeInfo], gang_on: list[str], spec: dict[str, Any]) -> GangScheduler:
    """A scheduler over NODES (topology zone > block > rack) with gang default/g (SPEC) bound on GANG_ON."""
    state = ClusterState()
    for n in nodes:
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    state.set_podgroup("default/g", podgroup(spec, name="g"))
    scheduler = GangScheduler(state)
    segments = "subGroups" in spec  # then seg-0, seg-1 ... of 4 pods each
    for i, where in enumerate(gang_on):
        scheduler.observe_pod(pod(f"g-{i}", group="g", subgroup=f"seg-{i // 4}" if segments else None, node_name=where))
    return scheduler


def test_a_placed_gang_the_cluster_changed_under_says_where_it_would_go_now() -> None:
    """Rack r1 (5 nodes free for it) was tighter than r2 (6); once plain pods take 2 nodes of r2,
    planning it again would choose r2: the explanation says so instead of pretending."""
    nodes = grid(racks=2, nodes=6)
    rack = {"minMember": 4, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}
    scheduler = _scheduler(nodes, [f"z1-b1-r1-n{i}" for i in range(2, 6)], rack)
    scheduler.observe_pod(pod("web-1", node_name="z1-b1-r1-n1"))
    why = "\n".join(why_lines(explain(scheduler, "default/g").why or Why("")))
    assert why == (
        "Why there (planned again now, its own pods' room given back, it goes where it is):\n"
        "  PodGroup default/g, required rack: rack z1/b1/r1, ranked 1st of 2 racks in the cluster with room for its"
        " minimum (4 pods x {cpu: 1, nvidia.com/gpu: 8}); runner-up rack z1/b1/r2: it would leave room for 2 more"
        " pods, rack z1/b1/r1 for 1 (the tightest fit first)\n"
        "  PodGroup default/g, compactness (no preference written): no node of rack z1/b1/r1 has room for its minimum"
        " (4 pods x {cpu: 1, nvidia.com/gpu: 8}): spread over rack z1/b1/r1"
    )
    for i in (1, 2):
        scheduler.observe_pod(pod(f"web-r2-{i}", node_name=f"z1-b1-r2-n{i}"))
    lines = why_lines(explain(scheduler, "default/g").why or Why(""))
    assert lines[:2] == [
        "Why there (planned again now, its own pods' room given back; the cluster changed since):",
        "  PodGroup default/g is in rack z1/b1/r1; planned now it would go to rack z1/b1/r2",
    ]


def test_room_counted_in_whole_parts_is_told_with_the_fragments_it_leaves_out() -> None:
    """Two segments of 4, each in one rack, the gang in one block. Block b1's racks have 5, 5 and 4
    nodes free (14, but whole segments use 12); block b2's have 4 and 4: b2 is the tighter fit."""
    sizes = {("b1", "r1"): 5, ("b1", "r2"): 5, ("b1", "r3"): 4, ("b2", "r1"): 4, ("b2", "r2"): 4}
    nodes = [node(f"{b}-{r}-n{i}", "z1", b, r) for (b, r), n in sizes.items() for i in range(1, n + 1)]
    spec = {
        "subGroups": [{"name": "seg-0", "minMember": 4}, {"name": "seg-1", "minMember": 4}],
        "topologyConstraints": {
            "global": {"requiredTopologyLevel": "block"},
            "subGroups": {s: {"requiredTopologyLevel": "rack"} for s in ("seg-0", "seg-1")},
        },
    }
    scheduler = _scheduler(nodes, [f"b2-r{i // 4 + 1}-n{i % 4 + 1}" for i in range(8)], spec)
    lines = why_lines(explain(scheduler, "default/g").why or Why(""))
    assert lines[1] == (
        "  PodGroup default/g, required block: block z1/b2, ranked 1st of 2 blocks in the cluster with room for its"
        " minimum (8 pods x {cpu: 1, nvidia.com/gpu: 8}); runner-up block z1/b1: it would leave room for 4 more pods,"
        " block z1/b2 for 0 (the tightest fit first) (counted in whole parts; pod by pod 14 and 8)"
    )


# -- evicted gangs, pods, and JSON ---------------------------------------------------------------

EVICTED = (
    "ml/small  (PodGroup ml/small)  Evicted\n"
    "  none of its pods exists now; its workload may create them again\n"
    "{asked}"
    "  Evicted: preempted at 2026-01-01T00:00:00Z by ml/urgent, for rack z1/b1/r3: 4 pod(s) evicted (ml/small-0,"
    " ml/small-1, ml/small-2, ml/small-3); the victims in all: 1 workload(s), 4 pod(s), priority <= 10, taking"
    " nvidia.com/gpu 32, cpu 32\n"
)


def test_an_evicted_gang_is_still_explained_with_what_evicted_it_and_when(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "ml/small", "-f", str(PREEMPTION)]) == 0
    assert capsys.readouterr().out == EVICTED.format(asked="")
    assert main(["explain", "ml/urgent", "-f", str(PREEMPTION)]) == 0
    assert "\n  Preempted for it: ml/small (4 pod(s)) at 2026-01-01T00:00:00Z\n" in capsys.readouterr().out


def test_an_evicted_pod_is_explained_through_its_gang(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "ml/small-2", "-f", str(PREEMPTION)]) == 0
    asked = "  Asked about pod ml/small-2: evicted (it no longer exists)\n"
    assert capsys.readouterr().out == EVICTED.format(asked=asked)


def test_a_pod_is_explained_through_its_gang_saying_which_pod_was_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explain", "ml/urgent-0", "-f", str(PREEMPTION)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "ml/urgent  (PodGroup ml/urgent)  Scheduled\n"
        "  4 pod(s) bound\n"
        "  Asked about pod ml/urgent-0 (PodGroup ml/urgent): bound to gpu-r3-1\n"
    )
    (tmp_path / "huge.yaml").write_text(HUGE)
    assert main(["explain", "ml/huge-worker-9", "-f", str(CLUSTER), "-f", str(tmp_path / "huge.yaml")]) == 0
    assert "\n  Asked about pod ml/huge-worker-9 (SubGroup worker-seg-1): pending\n" in capsys.readouterr().out


def test_a_name_without_a_namespace_is_answered_with_what_to_write(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "small-0", "-f", str(PREEMPTION)]) == 1
    assert capsys.readouterr().err == "topogang explain: write NAMESPACE/NAME: ml/small-0?\n"
    assert main(["explain", "urgent", "-f", str(PREEMPTION)]) == 1
    assert capsys.readouterr().err == "topogang explain: write NAMESPACE/NAME: ml/urgent?\n"
    assert main(["explain", "nothing", "-f", str(PREEMPTION)]) == 1
    assert capsys.readouterr().err == (
        "topogang explain: write NAMESPACE/NAME: nothing is named nothing in any namespace (no gang, workload or pod)\n"
    )


def test_a_plain_pod_is_not_a_gang(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "serving/inference-0", "-f", str(CLUSTER)]) == 1
    assert capsys.readouterr().err == (
        "topogang explain: pod serving/inference-0 belongs to no gang: kube-scheduler places it on its own\n"
    )


GANG_FIELDS = [
    "gang", "source", "phase", "message", "topology", "asked", "scopes", "planning", "why", "leftOut", "devices",
    "preemption", "defragmentation", "lastRepair", "reservation", "overdue", "queue", "assumed", "evicted",
    "preemptedForIt", "notes",
]  # fmt: skip


def test_explain_json_is_the_same_content_in_a_documented_structure(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "ml/urgent-0", "-f", str(PREEMPTION), "-o", "json"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["apiVersion"] == "topogang.io/explain/v1"
    (gang,) = doc["gangs"]
    assert list(gang) == GANG_FIELDS
    assert gang["asked"] == {
        "pod": "ml/urgent-0", "scope": "PodGroup ml/urgent", "state": "Bound", "node": "gpu-r3-1", "note": None
    }  # fmt: skip
    assert gang["preemptedForIt"] == ["ml/small (4 pod(s)) at 2026-01-01T00:00:00Z"]
    rack = gang["why"]["decisions"][0]
    assert rack == {
        "scope": "ml/urgent",
        "label": "PodGroup ml/urgent",
        "kind": "required",
        "level": "rack",
        "region": "the cluster",
        "pods": 4,
        "minimum": 4,
        "shape": "{cpu: 8, nvidia.com/gpu: 8}",
        "domains": 3,
        "withRoom": 1,
        "ranked": 1,
        "keys": ["holdsAll", "room", "path"],
        "preferredLevel": None,
        "chosen": "rack z1/b1/r3",
        "chosenRank": 0,
        "spread": False,
        "tried": [],
        "runnerUp": None,
        "why": None,
        "candidates": [
            {
                "domain": "rack z1/b1/r3",
                "room": 4,
                "free": 4,
                "holdsAll": True,
                "spans": None,
                "inner": None,
                "partDomains": None,
                "allotted": False,
            }
        ],
    }
    assert main(["explain", "ml/small", "-f", str(PREEMPTION), "-o", "json"]) == 0
    (small,) = orjson.loads(capsys.readouterr().out)["gangs"]
    assert list(small) == GANG_FIELDS
    assert small["evicted"] == {
        "workload": "ml/small",
        "cause": "Preempted",
        "by": "ml/urgent",
        "what": "1 workload(s), 4 pod(s), priority <= 10, taking nvidia.com/gpu 32, cpu 32",
        "pods": ["ml/small-0", "ml/small-1", "ml/small-2", "ml/small-3"],
        "podCount": 4,
        "whole": True,
        "time": "2026-01-01T00:00:00Z",
        "when": "at 2026-01-01T00:00:00Z",
        "for": "rack z1/b1/r3",
        "message": EVICTED.format(asked="").splitlines()[2].removeprefix("  Evicted: "),
    }


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


def test_elastic_subgroups_are_counted_apart_from_those_a_pod_is_required_of(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The PyTorchJob's worker has 5 segments of 4; the last 2 lie beyond its minimum (min 0 pods).
    workload = ROOT / "examples" / "workloads" / "pytorchjob.yaml"
    assert main(["explain", "default/pytorchjob-elastic", "-f", str(CLUSTER), "-f", str(workload)]) == 0
    out = capsys.readouterr().out
    assert "SubGroup worker: min 5 of 5 SubGroups, 2 of them elastic (no pod required); 20 / 20 / 20" in out
    assert "PodGroup default/pytorchjob-elastic: min 2 of 2 SubGroups; 21 / 21 / 21" in out  # none elastic
