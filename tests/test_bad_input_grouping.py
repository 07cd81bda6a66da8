"""Bad input to the grouper: a ResourceInterface's unknown fields and runaway jq expressions,
sizes past the limits (extender/model/limits.py), and segment annotations reported against the
workload that carries them. Each bad workload is Invalid alone; the others group as usual.
"""

from __future__ import annotations

import copy
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.grouping import ObjectIndex, group_pods, synthesize
from extender.model.errors import InvalidObject
from tests.grouping_builders import errors, group, job, jobset, kubeflow, lws, obj, owned_pod, raycluster, render

EXAMPLE = Path(__file__).parent.parent / "examples" / "workloads" / "raycluster-resourceinterface.yaml"
RI, _ = yaml.safe_load_all(EXAMPLE.read_text())
WORKERS = "spec.gangScheduling.podGroups[0].subgroups[1]"
LIMIT = "topogang's limit is {:,} (the README lists the limits)"
TFJOB = ("kubeflow.org/v1", "TFJob", "train")


def ri(path: tuple[str | int, ...] = (), **changes: Any) -> dict[str, Any]:
    """The seed's RayCluster ResourceInterface with `changes` made to the object at `path`."""
    out = copy.deepcopy(RI)
    target = out
    for step in path:
        target = target[step]
    target.update(changes)
    return dict(out)


def with_good_job(resource_interface: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Group a RayCluster under `resource_interface` beside a plain Job: (its errors, the Job's tree)."""
    result = group(raycluster([("cpu", 2, None)]), job(2, 2, name="ok"), objects=[resource_interface])
    bad = result.groups["ml/raycluster-rc"]
    assert bad.podgroup is None
    return errors(bad), render(result.groups["ml/job-ok"])


# -- unknown fields of a ResourceInterface -------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource_interface", "want"),
    [
        (
            ri(("spec", "gangScheduling", "podGroups", 0), requiredTopologyLevl="rack"),
            "ResourceInterface raycluster: spec.gangScheduling.podGroups[0].requiredTopologyLevl: unknown field;"
            " did you mean requiredTopologyConstraintsPath?",
        ),
        (
            ri(("spec", "gangScheduling", "podGroups", 0, "subgroups", 1), requiredTopologyConstraintPath=[".x"]),
            f"ResourceInterface raycluster: {WORKERS}.requiredTopologyConstraintPath: unknown field; did you mean"
            " requiredTopologyConstraintsPath?",
        ),
        (
            ri(("spec", "gangScheduling", "podGroups", 0, "subgroups", 0, "podClassifier"), matchLabel={}),
            "ResourceInterface raycluster: spec.gangScheduling.podGroups[0].subgroups[0].podClassifier.matchLabel:"
            " unknown field; did you mean matchLabels?",
        ),
        (
            ri(("spec", "gangScheduling", "podGroups", 0, "subgroups", 1, "podClassifier", "matchExpressions", 0),
               valuesPath="$wg.groupName"),
            f"ResourceInterface raycluster: {WORKERS}.podClassifier.matchExpressions[0].valuesPath: unknown field;"
            " did you mean valuePath?",
        ),
    ],
    ids=["podgroup-entry", "subgroup-entry", "classifier", "match-expression"],
)  # fmt: skip
def test_a_misspelt_resource_interface_field_makes_its_gang_invalid(
    resource_interface: dict[str, Any], want: str
) -> None:
    bad, good = with_good_job(resource_interface)
    assert len(bad) == 1
    assert bad[0].startswith(want)
    assert good == ["ml/job-ok sub=1", "  job min=2"]


def test_a_misspelt_gangscheduling_is_an_error_not_a_hand_off() -> None:
    # without the check, no podGroups means "hand off to the built-in Ray grouper": the typo
    # would silently replace the ResourceInterface's gang by another one
    spec = dict(RI["spec"])
    spec["gangSchedulling"] = spec.pop("gangScheduling")
    bad, _ = with_good_job({**RI, "spec": spec})
    assert bad == ["ResourceInterface raycluster: spec.gangSchedulling: unknown field; did you mean gangScheduling?"]


# -- jq with a budget -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "want"),
    [
        ("def f: f; f", "did not finish within the 1 s budget"),
        ("[repeat(1)]", "did not finish within the 1 s budget"),
        ('"x" * 1e9 | length', "exceeded the 256 MiB memory budget"),
        ("range(1e6) | tostring", "yields more than 20,000 values"),
    ],
    ids=["never-ends", "grows-forever", "too-much-memory", "too-many-results"],
)
def test_a_runaway_expression_makes_its_resource_interface_invalid_and_the_rest_groups(
    expression: str, want: str
) -> None:
    bad, good = with_good_job(
        ri(("spec", "gangScheduling", "podGroups", 0, "subgroups", 1), componentName=f"({expression})")
    )
    assert bad == [f"ResourceInterface raycluster: {WORKERS}.componentName: expression '({expression})' {want}"]
    assert good == ["ml/job-ok sub=1", "  job min=2"]


def test_an_expression_over_budget_is_not_run_again_for_the_same_object() -> None:
    bad_ri = ri(("spec", "gangScheduling", "podGroups", 0, "subgroups", 1), componentName="(def f: f; f)")
    first, _ = with_good_job(bad_ri)
    from extender.grouping.jq_budget import RUNNER

    remembered = len(RUNNER._over)
    again, _ = with_good_job(bad_ri)  # the verdict is remembered: no second second spent
    assert again == first
    assert len(RUNNER._over) == remembered


# -- size limits -------------------------------------------------------------------------------------------


def test_a_tfjob_with_a_billion_replicas_is_invalid_in_bounded_memory() -> None:
    # the pods that exist (the operator made two so far) join a gang that is Invalid
    tfjob = kubeflow("TFJob", {"Worker": 10**9})
    pods = [
        owned_pod(f"train-worker-{i}", TFJOB, labels={"training.kubeflow.org/replica-type": "worker"}) for i in range(2)
    ]
    tracemalloc.start()
    result = group_pods(pods, ObjectIndex([tfjob]), {})
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    g = result.groups["ml/tfjob-train"]
    assert errors(g) == [
        f"TFJob ml/train: spec.tfReplicaSpecs.Worker.replicas: is 1,000,000,000; {LIMIT.format(100_000)}"
    ]
    assert peak < 20 * 2**20  # nothing sized by the replica count was built


def test_synthesizing_a_billion_replicas_is_refused_before_making_pods() -> None:
    with pytest.raises(InvalidObject) as caught:
        synthesize(kubeflow("TFJob", {"Worker": 10**9}))
    assert str(caught.value) == (
        f"TFJob ml/train: spec.tfReplicaSpecs.Worker.replicas: is 1,000,000,000; {LIMIT.format(100_000)}"
    )


@pytest.mark.parametrize(
    ("workload", "want"),
    [
        (lws(replicas=1000, size=1000), "LeaderWorkerSet ml/llm: spec.replicas: would make 1,000,000 pods or more"),
        (
            jobset([("a", 60_000, 1), ("b", 60_000, 1)]),
            "JobSet ml/js: spec.replicatedJobs[1].template.spec.parallelism: would make 100,001 pods or more",
        ),
    ],
    ids=["lws-replicas-times-size", "jobset-total"],
)
def test_synthesis_counts_the_pods_before_making_them(workload: dict[str, Any], want: str) -> None:
    with pytest.raises(InvalidObject) as caught:
        synthesize(workload)
    assert str(caught.value) == f"{want}; {LIMIT.format(100_000)}"


def test_too_many_segments_are_refused_naming_the_annotation() -> None:
    seg = {"kai.scheduler/topology": "default", "kai.scheduler/segment-size": "1"}
    tfjob = kubeflow("TFJob", {"Worker": (30_000, seg)})
    pods = [owned_pod("train-worker-0", TFJOB, labels={"training.kubeflow.org/replica-type": "worker"})]
    g = group_pods(pods, ObjectIndex([tfjob]), {}).groups["ml/tfjob-train"]
    assert errors(g) == [
        "TFJob ml/train: spec.tfReplicaSpecs.Worker.template.metadata.annotations[kai.scheduler/segment-size]:"
        f" cuts the 30,000 replicas of worker into 30,000 segments; {LIMIT.format(20_000)}"
    ]


def test_too_many_kueue_slices_are_refused_naming_the_annotation() -> None:
    ann = {"kueue.x-k8s.io/podset-slice-required-topology": "rack", "kueue.x-k8s.io/podset-slice-size": "1"}
    tfjob = kubeflow("TFJob", {"Worker": (30_000, ann)})
    pods = [owned_pod("train-worker-0", TFJOB, labels={"training.kubeflow.org/replica-type": "worker"})]
    g = group_pods(pods, ObjectIndex([tfjob]), {}).groups["ml/tfjob-train"]
    assert errors(g) == [
        "TFJob ml/train: spec.tfReplicaSpecs.Worker.template.metadata.annotations[kueue.x-k8s.io/podset-slice-size]:"
        f" cuts the 30,000 replicas of worker into 30,000 slices; {LIMIT.format(20_000)}"
    ]


def test_a_gang_of_more_pods_than_the_limit_is_invalid() -> None:
    tfjob = kubeflow("TFJob", {"Worker": 60_000, "PS": 60_000})
    pods = [owned_pod("train-worker-0", TFJOB, labels={"training.kubeflow.org/replica-type": "worker"})]
    g = group_pods(pods, ObjectIndex([tfjob]), {}).groups["ml/tfjob-train"]
    assert errors(g) == [f"TFJob ml/train: spec: the gang has 120,000 pods; {LIMIT.format(100_000)}"]


def test_a_resource_interface_making_too_many_subgroups_is_invalid(monkeypatch: pytest.MonkeyPatch) -> None:
    # the limit made small, so that the tree built up to it stays small too
    from extender.grouping import resource_interface

    monkeypatch.setattr(resource_interface, "MAX_SUBGROUPS", 10)
    inner = {"foreach": "[range(6)] | .[] as $j", "componentName": '("leaf-\\($i)-\\($j)")', "minReplicas": "0"}
    outer = {"foreach": "[range(2)] | .[] as $i", "componentName": '("group-\\($i)")', "subgroups": [inner]}
    many = copy.deepcopy(RI)
    many["spec"]["gangScheduling"]["podGroups"][0]["subgroups"] = [outer]
    bad, _ = with_good_job(many)
    where = "spec.gangScheduling.podGroups[0].subgroups[0].subgroups[0]"
    assert bad == [f"ResourceInterface raycluster: {where}: makes more than 10 SubGroups; {LIMIT.format(10)}"]


def test_an_explicit_podgroup_with_too_many_pods_is_invalid(monkeypatch: pytest.MonkeyPatch) -> None:
    from extender.grouping import group as grouping_group
    from tests.builders import podgroup

    monkeypatch.setattr(grouping_group, "MAX_GANG_PODS", 2)
    pods = [owned_pod(f"p{i}", annotations={"pod-group-name": "pg"}) for i in range(3)]
    result = group_pods(pods, ObjectIndex([]), {"ml/pg": podgroup({"minMember": 3}, namespace="ml")})
    assert errors(result.groups["ml/pg"]) == [f"PodGroup ml/pg: metadata.name: 3 pods name it; {LIMIT.format(2)}"]


# -- segment annotations reported against the workload ---------------------------------------------------------


def test_a_bad_segment_annotation_read_from_pods_names_the_workload_and_the_annotation() -> None:
    owner = ("example.com/v1", "Trainer", "t1")
    ann = {
        "kai.scheduler/topology": "default",
        "kai.scheduler/segment-size": "two",
        "kai.scheduler/pod-index-label": "i",
    }
    pods = [owned_pod(f"t1-{i}", owner, labels={"i": str(i)}, annotations=ann) for i in range(2)]
    g = group_pods(pods, ObjectIndex([obj(*owner)]), {}).groups["ml/trainer-t1"]
    assert errors(g) == [
        "Trainer ml/t1 (read from its Pod ml/t1-0): metadata.annotations[kai.scheduler/segment-size]:"
        " expected a positive integer, got 'two'"
    ]


def test_segment_annotations_on_the_workload_itself_are_reported_as_ignored() -> None:
    ann = {"kai.scheduler/topology": "default", "kai.scheduler/segment-size": "4"}
    result = group(kubeflow("TFJob", {"Worker": 8}, annotations=ann))
    g = result.groups["ml/tfjob-train"]
    assert g.valid
    assert g.warnings == (
        "TFJob ml/train: metadata.annotations[kai.scheduler/segment-size] ignored: segments and slices are cut per"
        " replica type: put them on its PodTemplate",
    )


def test_a_null_replica_count_says_null() -> None:
    tfjob = kubeflow("TFJob", {"Worker": 2})
    tfjob["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = [None]
    pods = [owned_pod("train-worker-0", TFJOB, labels={"training.kubeflow.org/replica-type": "worker"})]
    g = group_pods(pods, ObjectIndex([tfjob]), {}).groups["ml/tfjob-train"]
    assert errors(g) == ["TFJob ml/train: spec.tfReplicaSpecs.Worker.replicas: expected an integer >= 0, got [null]"]


def test_a_missing_name_says_null() -> None:
    js = jobset([("a", 1, 1)])
    del js["spec"]["replicatedJobs"][0]["name"]
    pods = [owned_pod("js-a-0-0", ("jobset.x-k8s.io/v1alpha2", "JobSet", "js"))]
    g = group_pods(pods, ObjectIndex([js]), {}).groups["ml/jobset-js"]
    assert "JobSet ml/js: spec.replicatedJobs[0].name: expected a non-empty name, got null" in errors(g)
