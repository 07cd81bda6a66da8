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
