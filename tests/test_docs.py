"""The README and docs/ stay a user's way in: every relative link lands on a file (and a heading
that exists), the README stays short with its two commands on top, and what it says of its first
gang is what the simulator does."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from extender.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted(
    [README, *(ROOT / "docs").glob("*.md"), *(ROOT / "charts").rglob("README.md"), *(ROOT / "e2e").rglob("README.md")]
)
FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
INLINE_CODE = re.compile(r"`[^`]*`")


def prose(path: Path) -> list[str]:
    """The lines of PATH outside fenced code blocks."""
    lines, fenced = [], False
    for line in path.read_text().splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in prose(path):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[str]:
    return [t for line in prose(path) for t in LINK.findall(INLINE_CODE.sub("", line))]


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_every_relative_link_lands_on_a_file_and_a_heading(path: Path) -> None:
    broken = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(ROOT) if ROOT in dest.parents else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, broken


def test_the_checker_sees_links_and_headings() -> None:
    # The checks above mean something only if links and headings are found at all.
    assert len(links(README)) >= 10
    assert "which-owners-are-gangs-by-default-and-why" in anchors(ROOT / "docs" / "workloads.md")
    assert slug("Reservations and backfill (`extender/core/reservations.py`)") == (
        "reservations-and-backfill-extendercorereservationspy"
    )


def test_the_readme_is_short_and_starts_with_the_two_commands() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 300, len(lines)
    top = "\n".join(lines[:20])
    assert "make demo" in top
    assert "make test" in top


def test_readme_and_docs_describe_behaviour_not_history() -> None:
    history = re.compile(r"\bsessions? [0-9]+|\bissues? [0-9]+\b|\bseed 00[0-9]|STYLE\.md", re.IGNORECASE)
    for path in [README, *(ROOT / "docs").glob("*.md")]:
        hits = [line for line in path.read_text().splitlines() if history.search(line)]
        assert not hits, (path.name, hits)


def test_the_readme_lists_the_limits_the_messages_point_to() -> None:
    # Messages about a size past its limit say "the README lists the limits".
    from extender.model import limits

    text = README.read_text()
    for value in (limits.MAX_GANG_PODS, limits.MAX_SUBGROUPS, limits.JQ_MAX_RESULTS):
        assert f"{value:,}" in text, value
    assert f"{limits.JQ_MEMORY_BUDGET_BYTES // 2**20} MiB" in text
    assert f"{limits.JQ_MAX_RESULT_BYTES // 2**20} MiB" in text
    assert "2^63-1 milli-units" in text
    assert "(the README lists the limits)" in limits.beyond(1)


def test_the_first_gang_lands_as_the_readme_says(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    section = README.read_text().split("## A first gang", 1)[1]
    job = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "first-gang.yaml").write_text(job)
    cluster = ROOT / "examples" / "cluster-64.yaml"
    assert main(["simulate", "-f", str(cluster), "-f", str(tmp_path / "first-gang.yaml"), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [g["phase"] for g in doc["podGroups"]] == ["Scheduled"]
    rack = {p["name"]: p["node"].rsplit("-", 1)[0] for p in doc["pods"]}
    assert len(rack) == 8
    assert all(doc_pod["node"] for doc_pod in doc["pods"])
    segments: dict[str, set[str]] = {}
    for p in doc["pods"]:
        segments.setdefault(p["subGroup"], set()).add(rack[p["name"]])
    assert sorted(segments) == ["job-seg-0", "job-seg-1"]
    assert all(len(racks) == 1 for racks in segments.values())  # each segment on one rack
    assert set(rack.values()) == {"gpu-z2-b1-r1"}  # here both on the same one, as the README says
    assert "z2/b1/r1" in section


def test_the_simulator_reads_a_kubectl_list_from_stdin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The README's `kubectl get nodes,pods -A -o yaml | topogang simulate -f -`.
    import io

    import yaml

    docs = [d for d in yaml.safe_load_all((ROOT / "examples" / "cluster-64.yaml").read_text()) if d]
    nodes = [d for d in docs if d["kind"] == "Node"][:2]
    pending = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "ml"},
        "spec": {"containers": [{"name": "s", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]},
        "status": {"phase": "Pending"},
    }
    listed = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": [*nodes, pending]}
    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(listed)))
    assert main(["simulate", "-f", "-", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(p["name"], bool(p["node"])) for p in doc["pods"]] == [("web-0", True)]


def test_operations_lists_every_metric_topogang_exports() -> None:
    # Every metric is named once in extender/server/metrics.py, live ones (read at scrape time) too.
    source = (ROOT / "extender" / "server" / "metrics.py").read_text()
    names = set(re.findall(r'"(topogang_[a-z_]+)"', source))
    assert len(names) >= 20  # the names were found at all
    table = (ROOT / "docs" / "operations.md").read_text()
    missing = sorted(n for n in names if not re.search(rf"`{n}(_total)?(\{{[a-z,]*\}})?`", table))
    assert not missing, missing
