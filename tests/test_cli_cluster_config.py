"""`topogang serve` and `topogang explain` without a usable cluster config: no traceback, one
line naming what to set, exit 2. Each runs the real command in a subprocess, with no KUBECONFIG
and none of the variables a pod has (so neither a kubeconfig nor the in-cluster config exists).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# What would point it at a cluster: a kubeconfig, or the environment kubelet gives a pod.
CLUSTER_VARIABLES = ("KUBECONFIG", "TOPOGANG_KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")


def topogang(*args: str, **environ: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in CLUSTER_VARIABLES and not k.startswith("TOPOGANG_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "extender.cli", *args],
        env={**env, **environ},
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=120,
    )


def one_line(run: subprocess.CompletedProcess[str]) -> str:
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, run.stderr
    return lines[0]


def test_serve_outside_a_cluster_says_what_to_set() -> None:
    assert one_line(topogang("serve", "--insecure-http", "--listen=127.0.0.1:1")) == (
        "topogang serve: no kubeconfig given and not in a pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT"
        " unset); set --kubeconfig (or TOPOGANG_KUBECONFIG, KUBECONFIG) to a kubeconfig, or run topogang in a pod"
    )


def test_explain_outside_a_cluster_says_what_to_set() -> None:
    assert one_line(topogang("explain", "ml/train")) == (
        "topogang explain: no kubeconfig given and not in a pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT"
        " unset); set --kubeconfig or KUBECONFIG to a kubeconfig, run it in a pod, or explain a simulation (-f)"
    )


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (None, "no such file"),
        ("apiVersion: v1\nclusters: [\n", "not valid YAML at line 3: expected the node content"),
        ("", "not a kubeconfig"),
        ("apiVersion: v1\nkind: Config\ncurrent-context: gone\ncontexts: []\n", "Expected object with name gone"),
    ],
    ids=["missing", "not-yaml", "empty", "no-such-context"],
)
def test_a_broken_kubeconfig_is_named_with_what_is_wrong(tmp_path: Path, text: str | None, why: str) -> None:
    path = tmp_path / "kubeconfig"
    if text is not None:
        path.write_text(text)
    served = one_line(topogang("serve", "--insecure-http", "--listen=127.0.0.1:1", f"--kubeconfig={path}"))
    assert served.startswith(f"topogang serve: kubeconfig {path}: ")
    assert why in served
    assert served.endswith(
        "set --kubeconfig (or TOPOGANG_KUBECONFIG, KUBECONFIG) to a kubeconfig, or run topogang in a pod"
    )
    if text is None:  # explain reads it through the same code: once is enough
        explained = one_line(topogang("explain", "ml/train", KUBECONFIG=str(path)))
        assert explained.startswith(f"topogang explain: kubeconfig {path}: {why};")


@pytest.mark.skipif(
    Path("/var/run/secrets/kubernetes.io/serviceaccount/token").exists(), reason="runs in a pod: the token is there"
)
def test_in_a_pod_without_its_token_says_so() -> None:
    run = topogang("serve", "--insecure-http", KUBERNETES_SERVICE_HOST="10.0.0.1", KUBERNETES_SERVICE_PORT="443")
    assert one_line(run).startswith(
        "topogang serve: no kubeconfig given, and the in-cluster config cannot be used: Service token file does not"
        " exist; set --kubeconfig"
    )
