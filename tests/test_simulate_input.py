"""`topogang simulate` reads every object it is given or says why not: a key written twice is
refused with file and line (as `kubectl apply` refuses it), and folders are read whole.

Cluster: two nodes of 8 GPUs, racks r1 and r2 (tests/test_simulate_cli.py's NODES).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from extender.cli import main
from tests.test_simulate_cli import NODES, pods, write

JOB = """apiVersion: batch/v1
kind: Job
metadata:
  name: train
  annotations:
    kai.scheduler/topology-required-placement: example.com/topology-rack
  annotations:
    team: ml
spec:
  parallelism: 2
  template:
    spec:
      containers: [{name: c, resources: {requests: {nvidia.com/gpu: "8"}}}]
"""


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_second_annotations_block_is_refused_naming_key_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # PyYAML keeps the last block: the required rack would be dropped without a word.
    write(tmp_path, "nodes.yaml", NODES)
    path = write(tmp_path, "job.yaml", JOB)
    code, out, err = run(capsys, "simulate", "-f", str(tmp_path))
    assert (code, out) == (2, "")
    why = 'mapping key "annotations" already defined at line 5'
    assert err == f"topogang simulate: {path}:7:3: not valid YAML: {why}\n"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (  # deep inside a list item
            "kind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    image: a\n    image: b\n",
            'in.yaml:7:5: not valid YAML: mapping key "image" already defined at line 6',
        ),
        (  # a flow mapping
            "kind: Pod\nmetadata: {name: p, name: q}\n",
            'in.yaml:2:21: not valid YAML: mapping key "name" already defined at line 2',
        ),
        (  # JSON is read as YAML, and refused alike
            '{"kind": "Pod", "metadata": {"name": "p"}, "kind": "Node"}\n',
            'in.yaml:1:44: not valid YAML: mapping key "kind" already defined at line 1 (a --- missing',
        ),
    ],
    ids=["list-item", "flow", "json"],
)
def test_a_key_written_twice_at_any_depth_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, where: str
) -> None:
    code, _, err = run(capsys, "simulate", "-f", str(write(tmp_path, "in.yaml", text)))
    assert code == 2
    assert where in err.replace(f"{tmp_path}/", "")


def test_two_objects_run_together_on_stdin_are_refused_not_merged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # `cat job.yaml pod.yaml | topogang simulate -f -` where job.yaml lacks a final `---`: the
    # Pod's keys would replace the Job's, and the Job would vanish.
    job = JOB.replace("  annotations:\n    team: ml\n", "")
    pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}]}\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(job + pod))
    code, out, err = run(capsys, "simulate", "-f", str(write(tmp_path, "nodes.yaml", NODES)), "-f", "-")
    assert (code, out) == (2, "")
    assert err == (
        'topogang simulate: <stdin>:12:1: not valid YAML: mapping key "apiVersion" already defined at line 1'
        " (a --- missing between two objects?)\n"
    )


def test_yaml_merge_keys_still_override(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `<<` is how YAML says "these, then mine instead": not a key written twice.
    merged = "labels: {<<: {a: b, team: ml}, a: c}"
    text = NODES + pods("solo", 1).replace("annotations: {pod-group-name: solo}", merged)
    code, out, err = run(capsys, "simulate", "-o", "json", "-f", str(write(tmp_path, "in.yaml", text)))
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    assert [(p["name"], p["labels"]) for p in doc["pods"]] == [("solo-0", {"a": "c", "team": "ml"})]


LONELY = """---
apiVersion: scheduling.topogang.io/v1alpha1
kind: PodGroup
metadata: {name: lonely}
spec: {minMember: 4}
"""


def test_a_podgroup_without_pods_is_shown_waiting_for_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "in.yaml", NODES + LONELY)
    code, out, err = run(capsys, "simulate", "-o", "json", "-f", str(path))
    assert code == 0, err
    assert json.loads(out)["podGroups"] == [
        {
            "namespace": "default",
            "name": "lonely",
            "phase": "Pending",
            "reason": "GangIncomplete",
            "message": "PodGroup default/lonely: gang 0/4 pods present; waiting for its pods: no pod names it"
            " (label scheduling.x-k8s.io/pod-group: lonely, or annotation pod-group-name: lonely)",
        }
    ]
    code, out, _ = run(capsys, "simulate", "-f", str(path))
    assert "default/lonely  Pending" in out
    assert out.endswith("0 pod(s) placed, 0 pending, 1 PodGroup(s).\n")


def test_an_invalid_podgroup_without_pods_is_shown_invalid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = LONELY.replace("{minMember: 4}", "{minMember: 1, subGroups: [{name: a, parent: nope}]}")
    code, out, _ = run(capsys, "simulate", "-o", "json", "-f", str(write(tmp_path, "in.yaml", NODES + bad)))
    assert code == 3
    (group,) = json.loads(out)["podGroups"]
    assert (group["name"], group["phase"]) == ("lonely", "Invalid")
    assert "spec.subGroups[0].parent: names SubGroup 'nope', which does not exist" in group["message"]


def test_a_folder_is_read_with_its_subfolders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "00-nodes.yaml", NODES)
    (tmp_path / "team-a" / "jobs").mkdir(parents=True)
    write(tmp_path / "team-a" / "jobs", "job.yml", JOB.replace("  annotations:\n    team: ml\n", ""))
    solo = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "solo"}, "spec": {"containers": [{"name": "c"}]}}
    write(tmp_path / "team-a", "pod.json", json.dumps(solo))
    write(tmp_path / "team-a", "README.md", "not read: not YAML")
    (tmp_path / ".git").mkdir()
    write(tmp_path / ".git", "config.yaml", "[core]\n")  # hidden: skipped, else a YAML error
    (tmp_path / "empty").mkdir()
    code, out, err = run(capsys, "simulate", "-o", "json", "-f", str(tmp_path))
    assert code == 0, err
    assert sorted(p["name"] for p in json.loads(out)["pods"]) == ["solo", "train-0", "train-1"]
    code, _, err = run(capsys, "simulate", "-f", str(tmp_path / "empty"))
    assert code == 2
    assert err.endswith("empty: no .yaml, .yml, .json files in this directory or below\n")
