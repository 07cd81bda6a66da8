"""ResourceInterface (KAI's pod-grouping design): the RayCluster example end to end, foreach and nested foreach
with jq variables, minReplicasPath order, classifiers, topology paths, hand-off, and the
Invalid groups a broken expression or a wrong type makes.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.grouping import ObjectIndex, group_pods
from tests.grouping_builders import errors, group, job, members, obj, only, owned_pod, raycluster, render

EXAMPLE = Path(__file__).parent.parent / "examples" / "workloads" / "raycluster-resourceinterface.yaml"
RI, SEED_CLUSTER = yaml.safe_load_all(EXAMPLE.read_text())
WORKERS = "spec.gangScheduling.podGroups[0].subgroups[1]"


def ri(**changes: Any) -> dict[str, Any]:
    """The seed's RayCluster ResourceInterface with fields of its worker entry replaced."""
    out = copy.deepcopy(RI)
    out["spec"]["gangScheduling"]["podGroups"][0]["subgroups"][1].update(changes)
    return dict(out)


def test_seed_003_raycluster_example() -> None:
    g = only(group(SEED_CLUSTER, objects=[RI]))
    assert g.source == "RayCluster default/demo via ResourceInterface raycluster"
    assert render(g) == [
        "default/raycluster-demo sub=3 preferred=block",
        "  head min=1",
        "  gpu-workers min=4",
        "  gpu-shmorkers min=4",
    ]
    assert members(g) == {
        "gpu-shmorkers": [f"demo-gpu-shmorkers-worker-{i}" for i in range(4)],
        "gpu-workers": [f"demo-gpu-workers-worker-{i}" for i in range(4)],
        "head": ["demo-head"],
    }


def test_resource_interface_wins_over_the_builtin_grouper() -> None:
    # without minReplicas the built-in Ray grouper requires none of the group; the
    # ResourceInterface's minReplicasPath falls back to $wg.replicas
    cluster = raycluster([("cpu", 3, None)])
    assert render(only(group(cluster))) == ["ml/raycluster-rc sub=2", "  head min=1", "  cpu min=0"]
    assert render(only(group(cluster, objects=[RI]))) == ["ml/raycluster-rc sub=2", "  head min=1", "  cpu min=3"]


def test_minreplicas_literal_is_the_fallback_after_the_paths() -> None:
    cluster = raycluster([("cpu", 3, None)])
    g = only(group(cluster, objects=[ri(minReplicasPath=["$wg.minReplicas"], minReplicas="2")]))
    assert render(g) == ["ml/raycluster-rc sub=2", "  head min=1", "  cpu min=2"]


def test_the_seed_apiversion_kai_scheduler_v1_is_read_too() -> None:
    seed = {**ri(), "apiVersion": "kai.scheduler/v1"}
    assert only(group(raycluster([("cpu", 3, None)]), objects=[seed])).source.endswith("ResourceInterface raycluster")


NESTED = yaml.safe_load(
    """
apiVersion: scheduling.topogang.io/v1alpha1
kind: ResourceInterface
metadata: {name: trainingsets}
spec:
  targetGVK: {group: example.com, version: v1, kind: TrainingSet}
  gangScheduling:
    podGroups:
      - name: set
        requiredTopologyConstraintsPath: ['.metadata.annotations["example.com/placement"]']
        subgroups:
          - foreach: ".spec.roles[] as $role"
            componentName: "$role.name"
            minReplicasPath: ["$role.minShards"]
            preferredTopologyConstraintsPath: ["$role.prefer", ".spec.defaultPreference"]
            subgroups:
              - foreach: "$role.shards[] as $shard"
                componentName: '($role.name + "-" + $shard.name)'
                requiredTopologyConstraintsPath: ["$shard.within"]
                podClassifier:
                  matchLabels:
                    example.com/role: "$role.name"
                  matchExpressions:
                    - {key: example.com/shard, operator: In, valuePath: "$shard.name"}
                    - {key: example.com/spare, operator: DoesNotExist}
                minReplicasPath: ["$shard.size"]
"""
)
TRAINING_SET = obj(
    "example.com/v1",
    "TrainingSet",
    "ts",
    metadata={"annotations": {"example.com/placement": "zone"}},
    spec={
        "defaultPreference": "block",
        "roles": [
            {
                "name": "enc",
                "minShards": 1,
                "shards": [{"name": "a", "size": 2, "within": "rack"}, {"name": "b", "size": 2}],
            },
            {"name": "dec", "prefer": "rack", "shards": [{"name": "a", "size": 1}]},
        ],
    },
)
TS = ("example.com/v1", "TrainingSet", "ts")


def ts_pod(name: str, role: str, shard: str, **extra: str) -> Any:
    return owned_pod(name, TS, {"example.com/role": role, "example.com/shard": shard, **extra})


def test_nested_foreach_keeps_outer_variables_in_scope() -> None:
    pods = [ts_pod("enc-a-0", "enc", "a"), ts_pod("enc-a-1", "enc", "a"), ts_pod("enc-b-0", "enc", "b")]
    pods.append(ts_pod("dec-a-0", "dec", "a"))
    g = only(group(objects=[NESTED, TRAINING_SET], pods=pods))
    assert render(g) == [
        "ml/trainingset-ts sub=2 required=zone",
        "  enc sub=1 preferred=block",
        "    enc-a min=2 required=rack",
        "    enc-b min=2",
        "  dec sub=1 preferred=rack",
        "    dec-a min=1",
    ]
    assert members(g) == {"dec-a": ["dec-a-0"], "enc-a": ["enc-a-0", "enc-a-1"], "enc-b": ["enc-b-0"]}


def test_pod_no_classifier_matches_is_handed_to_the_next_owner_down() -> None:
    # pod -> Job -> TrainingSet: the ResourceInterface does not take the spare pod, the Job grouper does
    spare_job = job(1, 1, indexed=False, name="spare")
    spare_job["metadata"]["ownerReferences"] = [
        {**dict(zip(("apiVersion", "kind", "name"), TS, strict=True)), "controller": True}
    ]
    spare = owned_pod("spare-0", ("batch/v1", "Job", "spare"), {"example.com/role": "enc", "example.com/spare": "yes"})
    result = group(objects=[NESTED, TRAINING_SET, spare_job], pods=[spare, ts_pod("enc-a-0", "enc", "a")])
    assert result.pod_group == {"ml/enc-a-0": "ml/trainingset-ts", "ml/spare-0": "ml/job-spare"}


def test_pod_no_grouper_takes_is_plain_unless_it_asks_to_be_a_gang() -> None:
    # The ResourceInterface takes none of the owner's pods: rule 3, as for any owner nobody knows.
    spare = owned_pod("spare-0", TS, {"example.com/role": "other"})
    assert not group(objects=[NESTED, TRAINING_SET], pods=[spare]).pod_group
    asking = owned_pod("spare-0", TS, {"example.com/role": "other"}, {"kai.scheduler/topology": "default"})
    result = group(objects=[NESTED, TRAINING_SET], pods=[asking])
    assert render(only(result)) == ["ml/trainingset-ts sub=1", "  trainingset min=1"]
    assert only(result).source == "TrainingSet ml/ts"


def test_resource_interface_without_gang_scheduling_hands_off_to_the_builtin() -> None:
    handoff = {**RI, "spec": {"targetGVK": RI["spec"]["targetGVK"]}}
    g = only(group(raycluster([("cpu", 2, 2)]), objects=[handoff]))
    assert g.source == "RayCluster ml/rc"


def test_several_podgroups_make_several_gangs() -> None:
    two = copy.deepcopy(RI)
    head, workers = two["spec"]["gangScheduling"]["podGroups"][0]["subgroups"]
    two["spec"]["gangScheduling"]["podGroups"] = [
        {"name": "head", "subgroups": [head]},
        {"name": "workers", "subgroups": [workers]},
    ]
    result = group(raycluster([("cpu", 2, 2)]), objects=[two])
    assert {k: render(g) for k, g in result.groups.items()} == {
        "ml/raycluster-rc-head": ["ml/raycluster-rc-head sub=1", "  head min=1"],
        "ml/raycluster-rc-workers": ["ml/raycluster-rc-workers sub=1", "  cpu min=2"],
    }


BROKEN: list[tuple[str, dict[str, Any], list[str]]] = [
    (
        "jq-syntax-error",
        ri(foreach=".spec.workerGroupSpecs[ as $wg"),
        [
            f"ResourceInterface raycluster: {WORKERS}.foreach: expression '.spec.workerGroupSpecs[ as $wg' failed:"
            " jq: error: syntax error, unexpected as at <top-level>, line 1, column 25:"
        ],
    ),
    (
        "jq-runtime-error",
        ri(minReplicasPath=["$wg.groupName.x"]),
        [
            f"ResourceInterface raycluster: {WORKERS}.minReplicasPath[0]: expression '$wg.groupName.x' failed:"
            ' Cannot index string with string ("x")'
        ],
    ),
    (
        "jq-undefined-variable",
        ri(componentName="$group.groupName"),
        [
            f"ResourceInterface raycluster: {WORKERS}.componentName: expression '$group.groupName' failed:"
            " jq: error: $group is not defined at <top-level>, line 1, column 1:"
        ],
    ),
    (
        "foreach-binds-no-variable",
        ri(foreach=".spec.workerGroupSpecs[]"),
        [
            f"ResourceInterface raycluster: {WORKERS}.foreach:"
            " expression '.spec.workerGroupSpecs[]' binds no variable: write '<expression> as $name'"
        ],
    ),
    (
        "minreplicas-path-of-the-wrong-type",
        ri(minReplicasPath=["$wg.groupName"]),
        [
            f"ResourceInterface raycluster: {WORKERS}.minReplicasPath[0]:"
            " expression '$wg.groupName' resolves to 'cpu', expected an integer >= 0"
        ],
    ),
    (
        "componentname-of-the-wrong-type",
        ri(componentName="$wg.replicas"),
        [
            f"ResourceInterface raycluster: {WORKERS}.componentName:"
            " '$wg.replicas' resolves to 2, expected a SubGroup name"
        ],
    ),
    (
        "path-yielding-two-values",
        ri(minReplicasPath=[".spec.workerGroupSpecs[].replicas, 1"]),
        [
            f"ResourceInterface raycluster: {WORKERS}.minReplicasPath[0]:"
            " expression '.spec.workerGroupSpecs[].replicas, 1' yields 2 values, expected one"
        ],
    ),
    (
        "topology-path-of-the-wrong-type",
        ri(requiredTopologyConstraintsPath=["$wg.replicas"]),
        [
            f"ResourceInterface raycluster: {WORKERS}.requiredTopologyConstraintsPath[0]:"
            " expression '$wg.replicas' resolves to 2, expected a topology level name"
        ],
    ),
    (
        "value-path-of-the-wrong-type",
        ri(podClassifier={"matchExpressions": [{"key": "ray.io/group", "operator": "In", "valuePath": "$wg"}]}),
        [
            f"ResourceInterface raycluster: {WORKERS}.podClassifier.matchExpressions[0].valuePath:"
            ' expression \'$wg\' resolves to {"groupName": "cpu", "replicas": 2, "template": {"metadat..., expected a'
            " label value"
        ],
    ),
    (
        "unknown-operator",
        ri(podClassifier={"matchExpressions": [{"key": "ray.io/group", "operator": "Like", "values": ["a"]}]}),
        [
            f"ResourceInterface raycluster: {WORKERS}.podClassifier.matchExpressions[0].operator:"
            " expected one of In, NotIn, Exists, DoesNotExist, Equals, NotEquals, got 'Like'"
        ],
    ),
    (
        "leaf-without-a-minimum",
        ri(minReplicasPath=["$wg.minReplicas"]),
        [
            f"ResourceInterface raycluster: {WORKERS}:"
            " a leaf subgroup needs minReplicas or a minReplicasPath that resolves"
        ],
    ),
]


@pytest.mark.parametrize(("resource_interface", "want"), [c[1:] for c in BROKEN], ids=[c[0] for c in BROKEN])
def test_broken_resource_interface_makes_an_invalid_group(resource_interface: dict[str, Any], want: list[str]) -> None:
    result = group(raycluster([("cpu", 2, None)]), job(2, 2, name="ok"), objects=[resource_interface])
    bad = result.groups["ml/raycluster-rc"]
    assert bad.podgroup is None
    assert errors(bad) == want
    assert sorted(k for k, v in result.pod_group.items() if v == bad.key) == [
        "ml/rc-cpu-worker-0",
        "ml/rc-cpu-worker-1",
        "ml/rc-head",
    ]
    assert result.groups["ml/job-ok"].valid


def test_resource_interfaces_that_target_nothing_are_reported() -> None:
    broken = {"apiVersion": "scheduling.topogang.io/v1alpha1", "kind": "ResourceInterface", "metadata": {"name": "x"}}
    twin = {**RI, "metadata": {"name": "zz-twin"}}
    result = group_pods([], ObjectIndex([broken, RI, twin]), {})
    assert result.warnings == (
        "ResourceInterface x: ignored: spec.targetGVK is not an object {group, version, kind}",
        "ResourceInterface zz-twin: ignored: ResourceInterface raycluster already targets RayCluster ray.io/v1",
    )


def test_pods_no_leaf_matches_make_the_workload_invalid_naming_them() -> None:
    # only the head is classified: the workers must not form a second gang with the same key
    head_only = copy.deepcopy(RI)
    head_only["spec"]["gangScheduling"]["podGroups"][0]["subgroups"] = head_only["spec"]["gangScheduling"]["podGroups"][
        0
    ]["subgroups"][:1]
    result = group(raycluster([("cpu", 2, 2)]), objects=[head_only])
    g = only(result)
    assert g.key == "ml/raycluster-rc"
    assert g.podgroup is None
    assert errors(g) == [
        "Pod ml/rc-cpu-worker-0: metadata.labels: matches no podClassifier of RayCluster ml/rc via"
        " ResourceInterface raycluster (leaves: head) (and 1 more pod: ml/rc-cpu-worker-1)"
    ]
    assert set(result.pod_group.values()) == {"ml/raycluster-rc"}
