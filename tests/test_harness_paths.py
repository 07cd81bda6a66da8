"""`make test` runs as a normal user, and two runs side by side share no file: nothing in the
tests, the e2e harness or its scripts names a path under a system directory (/etc, /tmp, /var,
...), where a normal user cannot write or another run writes too. Each run keeps its files in a
temporary directory of its own (tempfile, pytest's tmp_path). The few such paths that remain are
listed below with why they touch nothing on the host."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A path under a directory that is the system's or shared by every user.
SYSTEM_PATH = re.compile(
    r"(?<![\w.$~-])/(?:etc|tmp|var|run|opt|srv|root|home|mnt|media|usr/local)(?![\w.-])[\w./@%+-]*"
)
# (file, path) -> why it is harmless.
ALLOWED = {
    ("e2e/controller_certs.py", "/tmp"): "the training operator's own /tmp, a run's directory in its mount namespace",
    ("e2e/controllers.py", "/tmp"): "the training operator's HOME inside its mount namespace",
    ("e2e/controllers.py", "/tmp/kubeconfig"): "the training operator's kubeconfig inside its mount namespace",
    ("e2e/test_gates.py", "/etc/topogang/webhook/tls.crt"): "a path in topogang's container, read from a manifest",
    ("tests/test_cli_cluster_config.py", "/var/run/secrets/kubernetes.io/serviceaccount/token"): (
        "only checked for existence (is the test in a pod?)"
    ),
    ("tests/test_server_settings.py", "/tmp/kubeconfig"): "a flag's value that is parsed, never opened",
    ("tests/test_server_settings.py", "/tmp/k"): "a flag's value that is parsed, never opened",
}


def _python_strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of the string constants of PATH, docstrings left out (prose)."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def _shell_code(path: Path) -> list[tuple[int, str]]:
    """(line, text) of the lines of a shell script or Makefile, comments left out."""
    out = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        code = re.sub(r"(^|\s)#.*", "", line)
        if code.strip():
            out.append((number, code))
    return out


def system_paths(root: Path) -> list[tuple[str, int, str]]:
    """(file, line, path) of every path under a system directory that ROOT's tests, e2e harness
    and scripts name."""
    found = []
    python = sorted((root / "e2e").rglob("*.py")) + sorted((root / "tests").rglob("*.py"))
    shell = [*sorted((root / "e2e").rglob("*.sh")), root / "Makefile", *sorted((root / ".ci").glob("*"))]
    for path in python + shell:
        if path == Path(__file__).resolve():  # this file names them to test the scan
            continue
        texts = _python_strings(path) if path.suffix == ".py" else _shell_code(path)
        rel = path.relative_to(root).as_posix()
        found += [(rel, line, match) for line, text in texts for match in SYSTEM_PATH.findall(text)]
    return found


def test_no_test_or_harness_file_names_a_system_path() -> None:
    found = [f"{file}:{line}: {path}" for file, line, path in system_paths(ROOT) if (file, path) not in ALLOWED]
    assert found == [], "paths under system directories (use the run's temporary directory):\n" + "\n".join(found)


def test_every_allowed_path_is_still_there() -> None:
    named = {(file, path) for file, _, path in system_paths(ROOT)}
    assert set(ALLOWED) <= named, f"no longer named, drop from ALLOWED: {sorted(set(ALLOWED) - named)}"


def test_the_scan_sees_a_fixed_path_in_code_and_not_in_prose(tmp_path: Path) -> None:
    (tmp_path / "e2e").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "Makefile").write_text("all:\n\tcp x /etc/kueue/metrics/certs/  # not /var/in/a/comment\n")
    (tmp_path / "e2e" / "h.py").write_text(
        '"""Writes nothing under /etc (prose)."""\nfrom pathlib import Path\n'
        'CERTS = Path("/tmp/k8s-webhook-server/serving-certs")\nAPI = "/apis/kueue.x-k8s.io/v1beta2"\n'
    )
    assert system_paths(tmp_path) == [
        ("e2e/h.py", 3, "/tmp/k8s-webhook-server/serving-certs"),
        ("Makefile", 2, "/etc/kueue/metrics/certs/"),
    ]
