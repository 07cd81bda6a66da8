"""`topogang simulate`: input handling, exit codes and the JSON contract."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from extender.cli import main

ROOT = Path(__file__).resolve().parents[1]
STORY2 = ROOT / "examples" / "podgroup-story2"


def simulate_json(capsys: pytest.CaptureFixture[str], *paths: str | Path, exit_code: int = 0) -> dict[str, object]:
    args = ["simulate", "--output", "json"]
    for p in paths:
        args += ["-f", str(p)]
    assert main(args) == exit_code
    return dict(json.loads(capsys.readouterr().out))


def test_story_2_json_lists_every_new_pod_with_group_subgroup_and_node(capsys: pytest.CaptureFixture[str]) -> None:
    doc = simulate_json(capsys, STORY2)
    pods = doc["pods"]
    assert isinstance(pods, list)
    assert len(pods) == 19  # the five running inference pods are not listed
    worker = next(p for p in pods if p["name"] == "distributed-training-worker-5")
    assert set(worker) == {"namespace", "name", "labels", "podGroup", "subGroup", "node", "reason"}
    assert worker["reason"] is None
    assert (worker["namespace"], worker["podGroup"], worker["subGroup"]) == ("ml", "distributed-training", "worker-1")
    racks = {}
    for p in pods:
        if p["subGroup"].startswith("worker-"):
            racks.setdefault(p["subGroup"], set()).add(p["node"].rsplit("-", 1)[0])
    assert all(len(r) == 1 for r in racks.values()), racks
    assert {r.split("-")[1] for rs in racks.values() for r in rs} == {"z1"}
    assert doc["podGroups"] == [
        {
            "namespace": "ml",
            "name": "distributed-training",
            "phase": "Scheduled",
            "reason": "Scheduled",
            "message": "19 pod(s) bound",
        }
    ]


def write(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text)
    return path


NODES = """
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {example.com/topology-rack: r1}}
status: {allocatable: {nvidia.com/gpu: "8", cpu: "8", pods: "10"}}
---
apiVersion: v1
kind: Node
metadata: {name: n2, labels: {example.com/topology-rack: r2}}
status: {allocatable: {nvidia.com/gpu: "8", cpu: "8", pods: "10"}}
---
apiVersion: scheduling.topogang.io/v1alpha1
kind: Topology
metadata: {name: t}
spec: {levels: [{nodeLabel: example.com/topology-rack}]}
"""


def pods(group: str, n: int, gpus: int = 8) -> str:
    return "".join(
        f"""---
apiVersion: v1
kind: Pod
metadata: {{name: {group}-{i}, annotations: {{pod-group-name: {group}}}}}
spec: {{containers: [{{name: c, resources: {{requests: {{nvidia.com/gpu: "{gpus}"}}}}}}]}}
"""
        for i in range(n)
    )


def test_an_invalid_podgroup_is_reported_and_the_others_still_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, "a-nodes.yaml", NODES)
    write(
        tmp_path,
        "b-groups.yaml",
        """
apiVersion: scheduling.topogang.io/v1alpha1
kind: PodGroup
metadata: {name: bad}
spec: {minMember: 1, topologyConstraints: {global: {requiredTopologyLevel: row}}}
---
apiVersion: scheduling.topogang.io/v1alpha1
kind: PodGroup
metadata: {name: good}
spec: {minMember: 1}
"""
        + pods("bad", 1)
        + pods("good", 1),
    )
    doc = simulate_json(capsys, tmp_path, exit_code=3)  # simulated, and a gang is Invalid
    groups = {g["name"]: g for g in doc["podGroups"]}  # type: ignore[union-attr]
    assert groups["bad"]["phase"] == "Invalid"
    assert groups["bad"]["message"] == (
        "PodGroup default/bad: spec.topologyConstraints.global.requiredTopologyLevel: "
        "'row' is not a level of Topology t (valid: example.com/topology-rack, hostname, kubernetes.io/hostname, "
        "node, rack)"
    )
    nodes = {p["name"]: p["node"] for p in doc["pods"]}  # type: ignore[union-attr]
    assert nodes == {"bad-0": None, "good-0": "n1"}


def test_a_gang_that_does_not_fit_stays_wholly_pending_with_its_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = NODES + "---\napiVersion: scheduling.topogang.io/v1alpha1\nkind: PodGroup\nmetadata: {name: big}\n"
    text += "spec: {minMember: 3}\n" + pods("big", 3)
    doc = simulate_json(capsys, write(tmp_path, "in.yaml", text))
    assert [p["node"] for p in doc["pods"]] == [None, None, None]  # type: ignore[index]
    assert doc["podGroups"][0]["message"] == (  # type: ignore[index]
        "PodGroup default/big: 3 pods x {nvidia.com/gpu: 8} in the cluster; only 2 fit even with nothing running"
    )


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("kind: Node\nmetadata: {name: [}\n", "in.yaml:2:"),
        ("- 1\n- 2\n", "in.yaml:1: expected a Kubernetes object (a mapping), got list"),
        ("metadata: {name: x}\n", "in.yaml:1: the object has no kind"),
        (
            "kind: Node\nmetadata: {name: n}\n---\nkind: Pod\nmetadata: {name: p}\n"
            "spec: {containers: [{name: c, resources: {requests: {cpu: lots}}}]}\n",
            "in.yaml:4: Pod default/p: spec.containers[0].resources.requests.cpu: expected a quantity",
        ),
    ],
)
def test_unreadable_input_exits_2_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, want: str
) -> None:
    path = write(tmp_path, "in.yaml", text)
    assert main(["simulate", "-f", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("topogang simulate: ")
    assert want in err.replace(str(tmp_path) + "/", "")


def test_missing_path_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "-f", "/nonexistent/x.yaml"]) == 2
    assert "/nonexistent/x.yaml: no such file or directory" in capsys.readouterr().err


def test_stdin_and_the_console_script(tmp_path: Path) -> None:
    text = NODES + pods("solo", 1).replace("annotations: {pod-group-name: solo}", "labels: {}")
    run = subprocess.run(
        [sys.executable, "-m", "extender.cli", "simulate", "-f", "-", "-o", "json"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    doc = json.loads(run.stdout)
    assert doc["pods"][0]["podGroup"] is None
    assert doc["pods"][0]["node"] in {"n1", "n2"}


def test_text_output_draws_the_racks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "-f", str(STORY2)]) == 0
    out = capsys.readouterr().out
    assert "Where the pods landed (Topology default: zone > block > rack > node)" in out
    assert "19 pod(s) placed, 0 pending, 1 PodGroup(s)." in out


def test_gangs_are_handled_higher_priority_first_then_older(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Room for one gang of 2 (two nodes). "late" is read last but its PodGroup has the higher
    # priority class; of two gangs of equal priority the older one wins.
    groups = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: scheduling.topogang.io/v1alpha1
kind: PodGroup
metadata: {name: early, creationTimestamp: "2026-01-01T00:00:00Z"}
spec: {minMember: 2}
---
apiVersion: scheduling.topogang.io/v1alpha1
kind: PodGroup
metadata: {name: late, creationTimestamp: "2026-01-02T00:00:00Z"}
spec: {minMember: 2, priorityClassName: high}
"""
    write(tmp_path, "a.yaml", NODES)
    write(tmp_path, "b.yaml", groups + pods("early", 2) + pods("late", 2))
    doc = simulate_json(capsys, tmp_path)
    placed = {p["name"]: p["node"] for p in doc["pods"]}  # type: ignore[union-attr]
    assert placed["late-0"]
    assert placed["late-1"]
    assert placed["early-0"] is None
    assert placed["early-1"] is None
    # Same priority: the older gang wins, whatever the order read.
    write(tmp_path, "b.yaml", groups.replace(", priorityClassName: high", "") + pods("late", 2) + pods("early", 2))
    doc = simulate_json(capsys, tmp_path)
    placed = {p["name"]: p["node"] for p in doc["pods"]}  # type: ignore[union-attr]
    assert placed["early-0"]
    assert placed["early-1"]
    assert placed["late-0"] is None


@pytest.mark.parametrize(
    ("pod_spec", "classes"),
    [
        ("priorityClassName: system-cluster-critical, ", ""),  # a built-in class, never written
        ("", "globalDefault: true\n"),  # no class named: the globalDefault one
    ],
    ids=["system-class", "global-default"],
)
def test_a_pods_priority_is_resolved_as_the_api_server_resolves_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pod_spec: str, classes: str
) -> None:
    # Room for one gang of 2. "mid" is older, read first, of priority 50; "top" outranks it
    # through its pods' priority as the API server would set it.
    objects = f"""
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {{name: fifty}}
value: 50
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {{name: hundred}}
value: 100
{classes}---
apiVersion: scheduling.topogang.io/v1alpha1
kind: PodGroup
metadata: {{name: mid, creationTimestamp: "2026-01-01T00:00:00Z"}}
spec: {{minMember: 2, priorityClassName: fifty}}
---
apiVersion: scheduling.topogang.io/v1alpha1
kind: PodGroup
metadata: {{name: top, creationTimestamp: "2026-01-02T00:00:00Z"}}
spec: {{minMember: 2}}
"""
    top = pods("top", 2).replace("spec: {containers", f"spec: {{{pod_spec}containers")
    mid = pods("mid", 2).replace("spec: {containers", "spec: {priorityClassName: fifty, containers")
    write(tmp_path, "a.yaml", NODES)
    write(tmp_path, "b.yaml", objects + mid + top)
    doc = simulate_json(capsys, tmp_path)
    placed = {p["name"]: p["node"] for p in doc["pods"]}  # type: ignore[union-attr]
    assert placed["top-0"]
    assert placed["top-1"]
    assert placed["mid-0"] is None
    assert placed["mid-1"] is None
    # The pod's own spec.priority wins over its class (0 here: "mid" goes first again).
    write(tmp_path, "b.yaml", objects + mid + top.replace("spec: {", "spec: {priority: 0, "))
    doc = simulate_json(capsys, tmp_path)
    placed = {p["name"]: p["node"] for p in doc["pods"]}  # type: ignore[union-attr]
    assert placed["mid-0"]
    assert placed["mid-1"]
    assert placed["top-0"] is None


def test_a_priority_class_whose_global_default_is_not_a_boolean_is_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: x}\nvalue: 5\n"
    bad += "globalDefault: yes-please\n"
    write(tmp_path, "a.yaml", NODES + "---\n" + bad)
    assert main(["simulate", "-f", str(tmp_path)]) == 2
    assert "PriorityClass x: globalDefault: expected true or false, got 'yes-please'" in capsys.readouterr().err


CLUSTER_64 = ROOT / "examples" / "cluster-64.yaml"


def job_of_12(annotation: str) -> str:
    return f"""
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  namespace: ml
  annotations: {{kai.scheduler/topology: default, {annotation}: rack}}
spec:
  completionMode: Indexed
  completions: 12
  parallelism: 12
  template:
    spec:
      containers: [{{name: c, resources: {{requests: {{cpu: "8", nvidia.com/gpu: "8"}}}}}}]
"""


@pytest.mark.parametrize(
    ("annotation", "phase", "message"),
    [
        (
            "kai.scheduler/topology-required-placement",
            "Pending",
            "PodGroup ml/job-train: 12 pods x {cpu: 8, nvidia.com/gpu: 8} in one rack; the best rack fits 8 even"
            " with nothing running; nodes left out: 1 not ready or cordoned",
        ),
        (
            "kai.scheduler/topology-required-placment",
            "Invalid",
            "Job ml/train: metadata.annotations[kai.scheduler/topology-required-placment]: unknown annotation;"
            " did you mean kai.scheduler/topology-required-placement?",
        ),
    ],
    ids=["spelt-right", "misspelt"],
)
def test_a_misspelt_required_placement_is_refused_not_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], annotation: str, phase: str, message: str
) -> None:
    exit_code = 3 if phase == "Invalid" else 0  # an Invalid gang fails the run (so CI can gate on it)
    doc = simulate_json(capsys, CLUSTER_64, write(tmp_path, "job.yaml", job_of_12(annotation)), exit_code=exit_code)
    (group,) = doc["podGroups"]  # type: ignore[misc]
    assert (group["phase"], group["message"]) == (phase, message)
    assert all(p["node"] is None for p in doc["pods"])  # type: ignore[union-attr]


def test_one_typo_in_a_256_worker_template_is_one_short_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tfjob = """
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: t, namespace: ml, annotations: {kai.scheduler/topology: default}}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 256
      template:
        metadata:
          annotations: {kai.scheduler/segment-size: "2", kai.scheduler/segment-topology-required-placement: Rack}
        spec: {containers: [{name: c, resources: {requests: {cpu: "1"}}}]}
"""
    assert main(["simulate", "-f", str(CLUSTER_64), "-f", str(write(tmp_path, "tf.yaml", tfjob))]) == 3  # Invalid
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("ml/tfjob-t"))
    assert line.count("is not a level") == 1
    assert line.endswith("'Rack' is not a level of Topology default; did you mean rack?")
    assert len(line) < 300


def test_exit_3_when_a_gang_or_object_is_invalid_so_ci_can_gate_on_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = "---\napiVersion: scheduling.topogang.io/v1alpha1\nkind: PodGroup\nmetadata: {name: bad}\n"
    bad += "spec: {minMember: 1, topologyConstraints: {global: {requiredTopologyLevel: row}}}\n" + pods("bad", 1)
    huge = "---\napiVersion: batch/v1\nkind: Job\nmetadata: {name: huge}\nspec: {parallelism: 1000000000}\n"
    cases = {
        "good.yaml": (NODES + pods("solo", 1).replace("annotations: {pod-group-name: solo}", "labels: {}"), 0),
        "warned.yaml": (NODES + "---\napiVersion: example.com/v1\nkind: Thing\nmetadata: {name: t}\n", 0),
        "bad-gang.yaml": (NODES + bad, 3),
        "bad-workload.yaml": (NODES + huge, 3),
        "unreadable.yaml": (NODES + "---\nkind: [\n", 2),
    }
    for name, (text, want) in cases.items():
        assert main(["simulate", "-f", str(write(tmp_path, name, text))]) == want, name
        out, err = capsys.readouterr()
        if want == 3:
            assert out  # the results are printed all the same
            assert err.startswith("topogang simulate: Invalid: default/")
            assert err.endswith(" (exit 3)\n")
    # the process's own status, as a CI step sees it
    run = subprocess.run(
        [sys.executable, "-m", "extender.cli", "simulate", "-f", str(tmp_path / "bad-gang.yaml")],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert (run.returncode, run.stderr) == (3, "topogang simulate: Invalid: default/bad (exit 3)\n")


def test_help_says_f_repeats_and_lists_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "repeat -f for more" in text
    assert "Exit status: 0 simulated; 2 input that cannot be read" in text
    assert "3 simulated, but a gang or an object is Invalid" in text


def test_the_picture_shows_the_pods_already_running_and_the_cordoned_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    # The demo: why the first segment starts at node 4 of rack r1, and what the last rack holds.
    assert main(["simulate", "-f", str(ROOT / "examples" / "tfjob-segments")]) == 0
    out = capsys.readouterr().out
    picture = out[out.index("Where the pods landed") :].splitlines()
    assert picture[0] == (
        "Where the pods landed (Topology default: zone > block > rack > node), with each rack's running pods and"
        " cordoned nodes:"
    )
    rack_r1 = picture[picture.index("      rack r1") + 1 : picture.index("      rack r1") + 5]
    assert [line.strip() for line in rack_r1] == [
        "gpu-z1-b1-r1-1: distributed-training-chief-0 distributed-training-ps-0 distributed-training-ps-1"
        " (running: serving/inference-0)",
        "gpu-z1-b1-r1-2: (running: serving/inference-1)",
        "gpu-z1-b1-r1-3: (running: serving/inference-2)",
        "gpu-z1-b1-r1-4: distributed-training-worker-0",
    ]
    assert "        gpu-z1-b2-r2-8: (cordoned)" in picture
    assert not any("gpu-z2" in line for line in picture)  # racks where nothing landed are left out


def test_bound_is_shown_against_the_gangs_minimum(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    groups = ""
    for name, minimum in (("short", 4), ("placed", 1)):
        groups += f"---\napiVersion: scheduling.topogang.io/v1alpha1\nkind: PodGroup\nmetadata: {{name: {name}}}\n"
        groups += f"spec: {{minMember: {minimum}}}\n"
    bad = "---\napiVersion: scheduling.topogang.io/v1alpha1\nkind: PodGroup\nmetadata: {name: bad}\n"
    bad += "spec: {minMember: 1, subGroups: [{name: a, parent: nope}]}\n"
    path = write(tmp_path, "in.yaml", NODES + groups + bad + pods("short", 2) + pods("placed", 2, gpus=1))
    assert main(["simulate", "-f", str(path)]) == 3
    rows = {line.split()[0]: line.split()[1:3] for line in capsys.readouterr().out.splitlines()[1:4]}
    assert rows == {
        "default/short": ["Pending", "0/4"],  # 2 of its 4 pods present, none bound
        "default/placed": ["Scheduled", "2/1"],  # more bound than the minimum
        "default/bad": ["Invalid", "-"],
    }


def test_the_simulator_says_a_gang_is_overdue_with_the_servers_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both nodes run a pod started at 10:00 (the input's clock); gang `big` (2 nodes' worth) was
    made at 09:00 with `max-wait: 30m`: overdue since 09:30, and room is held for it."""
    running = "".join(
        f"""---
apiVersion: v1
kind: Pod
metadata: {{name: run-{n}, creationTimestamp: "2027-01-15T10:00:00Z"}}
spec: {{nodeName: {n}, containers: [{{name: c, resources: {{requests: {{nvidia.com/gpu: "8"}}}}}}]}}
status: {{phase: Running, startTime: "2027-01-15T10:00:00Z"}}
"""
        for n in ("n1", "n2")
    )
    group = """---
apiVersion: scheduling.topogang.io/v1alpha1
kind: PodGroup
metadata:
  name: big
  creationTimestamp: "2027-01-15T09:00:00Z"
  annotations: {scheduling.topogang.io/max-wait: 30m}
spec: {minMember: 2}
"""
    doc = simulate_json(capsys, write(tmp_path, "in.yaml", NODES + running + group + pods("big", 2)))
    (big,) = [g for g in doc["podGroups"] if g["name"] == "big"]  # type: ignore[union-attr]
    assert (
        "overdue since 2027-01-15T09:30:00Z: waited past its maximum wait of 30m0s; room is held for it"
        in (big["message"])
    )
    assert "kept from work of any priority that is not overdue" in big["message"]
