"""extender/model/annotation_keys.py: every key topogang reads or writes under a watched prefix is
listed there; a written key is fine, misspelt (with the key it misspells) or unknown; and checking
a map of thousands of keys compares at most MAX_COMPARED of them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from extender.core.movable import MOVABLE
from extender.grouping import names as n
from extender.grouping.kinds import jobset, lws
from extender.model import annotation_keys as keys
from extender.model.labels import ON_UNREPAIRABLE, SUBGROUP_LABEL, TOPOLOGY_ANNOTATION
from extender.model.max_wait import MAX_WAIT_ANNOTATION
from extender.model.runtime_bound import RUNTIME_BOUND_ANNOTATION

ROOT = Path(__file__).resolve().parent.parent
# Key-shaped string literals under the prefixes the module lists (and JobSet's labels);
# apiVersions (`kai.scheduler/v1`) and GVKs (`kueue.x-k8s.io/LocalQueue`) are not keys.
LITERAL = re.compile(
    r"[\"']((?:kai\.scheduler|kueue\.x-k8s\.io|leaderworkerset\.sigs\.k8s\.io|(?:alpha\.)?jobset\.sigs\.k8s\.io"
    r"|scheduling\.topogang\.io)/[A-Za-z0-9._-]+)[\"']"
)
NOT_KEYS = re.compile(r".*/(v\d[a-z0-9]*|[A-Z][A-Za-z]+)$")


def literals() -> set[str]:
    found = set()
    for path in (ROOT / "extender").rglob("*.py"):
        if path.name != "annotation_keys.py":
            found |= {k for k in LITERAL.findall(path.read_text()) if not NOT_KEYS.match(k)}
    return found


def test_every_key_topogang_reads_or_writes_is_in_the_one_list() -> None:
    written = literals()
    assert len(written) > 20  # the scan finds the labels the groupers read (LWS, JobSet, KAI's subgroup-name)
    assert sorted(written - keys.KNOWN) == []


def test_every_annotation_the_groupers_read_is_one_topogang_reads() -> None:
    read = {
        *(a for a, _ in n.PLACEMENT_SPELLINGS),
        n.KAI_TOPOLOGY,
        *n.KAI_SEGMENT_ANNOTATIONS,
        n.KAI_POD_INDEX_LABEL,
        n.KUEUE_UNCONSTRAINED,
        n.KUEUE_SLICE_REQUIRED,
        n.KUEUE_SLICE_SIZE,
        n.KUEUE_SLICE_CONSTRAINTS,
        n.KUEUE_PODSET_GROUP,
        lws.EXCLUSIVE,
        lws.SUBGROUP_EXCLUSIVE,
        jobset.EXCLUSIVE,
        jobset.NODE_SELECTOR,
        TOPOLOGY_ANNOTATION,
        ON_UNREPAIRABLE,
        RUNTIME_BOUND_ANNOTATION,
        MAX_WAIT_ANNOTATION,
        MOVABLE,
    }
    assert read == keys.READ
    assert SUBGROUP_LABEL in keys.KAI  # a label topogang reads, which KAI defines


def test_the_project_lists_keep_to_their_prefixes() -> None:
    for project in keys.PROJECTS:
        stray = [k for k in project.keys if not k.startswith(project.prefixes)]
        # JobSet's own labels (jobset.sigs.k8s.io/) are listed but not watched: users write none of them
        assert all(k.startswith("jobset.sigs.k8s.io/") for k in stray), (project.name, stray)


VERDICTS = [
    # misspelt: a name close to one topogang reads, under its prefix
    ("kai.scheduler/topology-required-placment", "kai.scheduler/topology-required-placement"),
    ("kai.scheduler/topolgy", "kai.scheduler/topology"),
    ("kai.scheduler/segment-sise", "kai.scheduler/segment-size"),
    ("kai.scheduler/required-placement", "kai.scheduler/topology-required-placement"),
    ("kueue.x-k8s.io/podset-required-topolgy", "kueue.x-k8s.io/podset-required-topology"),
    ("kueue.x-k8s.io/podset-slice-sizes", "kueue.x-k8s.io/podset-slice-size"),
    ("leaderworkerset.sigs.k8s.io/exclusive-topolgy", "leaderworkerset.sigs.k8s.io/exclusive-topology"),
    ("alpha.jobset.sigs.k8s.io/exclusive-topologies", "alpha.jobset.sigs.k8s.io/exclusive-topology"),
    ("scheduling.topogang.io/runtime-bond", "scheduling.topogang.io/runtime-bound"),
    # case aside
    ("kai.scheduler/Topology-Required-Placement", "kai.scheduler/topology-required-placement"),
    ("KAI.scheduler/topology", "kai.scheduler/topology"),
    # a misspelt prefix before a name topogang reads
    ("kai.schedular/topology-required-placement", "kai.scheduler/topology-required-placement"),
    ("jobset.sigs.k8s.io/exclusive-topology", "alpha.jobset.sigs.k8s.io/exclusive-topology"),
    ("leaderworkerset.x-k8s.io/exclusive-topology", "leaderworkerset.sigs.k8s.io/exclusive-topology"),
]


@pytest.mark.parametrize(("key", "meant"), VERDICTS, ids=[k for k, _ in VERDICTS])
def test_a_key_close_to_one_topogang_reads_is_misspelt(key: str, meant: str) -> None:
    found, skipped = keys.check([key])
    assert [(u.key, u.meant) for u in found] == [(key, meant)]
    assert skipped == 0


@pytest.mark.parametrize(
    "key",
    [
        # defined by their projects, not read by topogang
        "kai.scheduler/queue",
        "kai.scheduler/preemptibility",
        "kueue.x-k8s.io/queue-name",
        "kueue.x-k8s.io/podset",
        "kueue.x-k8s.io/pod-group-name",
        "leaderworkerset.sigs.k8s.io/size",
        "leaderworkerset.sigs.k8s.io/subdomainPolicy",
        "alpha.jobset.sigs.k8s.io/node-selector",
        "scheduling.topogang.io/plan-generation",
        # under prefixes nobody watches
        "example.com/topology-rack",
        "provreq.kueue.x-k8s.io/maxRunDurationSeconds",
        "topology",
    ],
)
def test_a_key_its_project_defines_or_nobody_watches_is_fine(key: str) -> None:
    assert keys.check([key]) == ([], 0)


@pytest.mark.parametrize(
    ("key", "project"),
    [
        ("kai.scheduler/pod-index", "KAI-Scheduler"),
        ("kueue.x-k8s.io/my-own-thing", "Kueue"),
        ("leaderworkerset.sigs.k8s.io/topology", "LeaderWorkerSet"),
        ("scheduling.topogang.io/colour", "topogang"),
        ("kai.scheduler/" + "x" * 300, "KAI-Scheduler"),
    ],
)
def test_a_key_close_to_nothing_under_a_watched_prefix_is_unknown(key: str, project: str) -> None:
    (found,), _ = keys.check([key])
    assert (found.meant, found.project) == (None, project)


def test_thousands_of_keys_compare_at_most_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[str] = []
    real = keys._meant

    def counting(key: str) -> str | None:
        compared.append(key)
        return real(key)

    monkeypatch.setattr(keys, "_meant", counting)
    written = [f"kai.scheduler/unknown-{i}" for i in range(5000)] + [f"example.com/k-{i}" for i in range(5000)]
    found, skipped = keys.check(written)
    assert len(compared) == len(found) == keys.MAX_COMPARED
    assert skipped == 5000 - keys.MAX_COMPARED
    _, warnings = keys.problems(written, "Job ml/j")
    assert warnings[-1] == (
        f"Job ml/j: metadata.annotations: {5000 - keys.MAX_COMPARED:,} more keys under the prefixes topogang reads"
        f" were not checked (it checks {keys.MAX_COMPARED} an object)"
    )
