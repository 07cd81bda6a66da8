"""Property-based fuzzing of everything topogang reads from outside (hypothesis).

- Every verb's request decoding, through the aiohttp app and aiohttp's test client, with bodies
  from raw bytes to near-valid ExtenderArgs/ExtenderBindingArgs/ExtenderPreemptionArgs with
  wrong types in every field: never a 5xx, always a JSON answer.
- Every annotation the grouper reads, on the workload and on its pod templates, with arbitrary
  values: grouping never raises, and a valid workload grouped beside the fuzzed one gets the same
  gang as alone and is planned (a gang with bad input never blocks another).
- PodGroup, Topology and ResourceInterface bodies: the parsers return or raise InvalidObject
  (never another exception); a fuzzed ResourceInterface, or Grove PodGang, never stops the
  grouping of others.

Example counts are modest (FUZZ below) so `make test` stays quick; TOPOGANG_FUZZ=deep runs many
more.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from extender.core.apply import apply_object
from extender.core.cluster import ClusterState
from extender.core.scheduler import GangScheduler
from extender.grouping import ObjectIndex, group_pods
from extender.grouping import names as n
from extender.grouping.kinds import jobset as jobset_kind
from extender.grouping.kinds import lws as lws_kind
from extender.model.errors import InvalidObject
from extender.model.labels import POD_GROUP_ANNOTATION, TOPOLOGY_ANNOTATION
from extender.model.podgroup import parse_podgroup
from extender.model.topology import parse_topology
from extender.server.app import create_app
from tests.builders import TOPO, grid, pod
from tests.grouping_builders import job, jobset, kubeflow, lws, pods_of
from tests.test_server_app import make

# No example database: every run draws afresh (and writes nothing into the checkout).
QUIET = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
FUZZ = settings(
    max_examples=2000 if os.environ.get("TOPOGANG_FUZZ") == "deep" else 60,
    deadline=None,
    database=None,
    suppress_health_check=QUIET,
)

# -- strategies ----------------------------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),  # JSON numbers as Go and orjson read them
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=12,
)
names = st.one_of(st.sampled_from(["p", "g-0", "default", "z1-b1-r1-n1", ""]), st.text(max_size=20), json_values)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(strategy, json_values)


def keyed(required: Mapping[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """Dicts with any subset of these keys, in Go's PascalCase or another case, or not a dict."""
    cased = st.fixed_dictionaries({}, optional=dict(required)).flatmap(
        lambda d: st.tuples(*(st.sampled_from([k, k.lower(), k.upper()]) for k in d)).map(
            lambda ks: dict(zip(ks, d.values(), strict=True))
        )
    )
    return st.one_of(cased, json_values)


metadata = keyed(
    {
        "name": names,
        "namespace": names,
        "uid": names,
        "labels": maybe(st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=3)),
        "annotations": maybe(st.dictionaries(st.sampled_from(["pod-group-name", "x"]), names, max_size=2)),
        "ownerReferences": json_values,
    }
)
pod_body = keyed({"metadata": metadata, "spec": json_values, "status": json_values})
node_body = keyed({"metadata": metadata, "spec": json_values, "status": json_values})
extender_args = keyed(
    {
        "Pod": pod_body,
        "NodeNames": maybe(st.lists(names, max_size=4)),
        "Nodes": maybe(keyed({"items": maybe(st.lists(node_body, max_size=3))})),
    }
)
binding_args = keyed({"PodName": names, "PodNamespace": names, "PodUID": names, "Node": names})
victims = st.dictionaries(
    st.text(max_size=8), maybe(keyed({"Pods": maybe(st.lists(pod_body, max_size=2)), "NumPDBViolations": names}))
)
preemption_args = keyed({"Pod": pod_body, "NodeNameToVictims": maybe(victims), "NodeNameToMetaVictims": json_values})
bodies = st.one_of(
    st.binary(max_size=64),
    json_values.map(orjson.dumps),
    st.one_of(extender_args, binding_args, preemption_args).map(orjson.dumps),
)

# -- every verb through the app ------------------------------------------------------------------


class Http:
    """The app on aiohttp's test server, in a loop of its own (hypothesis calls sync tests)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        _, _, extender = make(bind_timeout=0.05)

        async def start() -> TestClient[Any, Any]:
            client: TestClient[Any, Any] = TestClient(TestServer(create_app(extender, lambda: True, "/topogang")))
            await client.start_server()
            return client

        self.client = self.loop.run_until_complete(start())

    def post(self, verb: str, body: bytes) -> tuple[int, bytes]:
        async def call() -> tuple[int, bytes]:
            resp = await self.client.post(f"/topogang/{verb}", data=body)
            return resp.status, await resp.read()

        return self.loop.run_until_complete(call())

    def close(self) -> None:
        self.loop.run_until_complete(self.client.close())
        self.loop.close()


@pytest.fixture(scope="module")
def http() -> Iterator[Http]:
    server = Http()
    try:
        yield server
    finally:
        server.close()


@FUZZ
@given(verb=st.sampled_from(["filter", "prioritize", "bind", "preempt"]), body=bodies)
# Found by this test (victims that are not objects made decode_victims raise):
@example(verb="preempt", body=b'{"NodeNameToVictims":{"":null},"Pod":{"metadata":{"name":""}}}')
@example(verb="preempt", body=b'{"NodeNameToVictims":{"n":[1]},"Pod":{"metadata":{"name":"p"}}}')
@example(verb="preempt", body=b'{"NodeNameToVictims":{"n":{"Pods":[{"metadata":[]}]}},"Pod":{"metadata":{"name":"p"}}}')
def test_no_request_body_makes_a_5xx(http: Http, verb: str, body: bytes) -> None:
    status, answer = http.post(verb, body)
    assert status < 500, (status, answer)
    decoded = orjson.loads(answer)
    if status >= 400:
        assert isinstance(decoded, dict)
        assert decoded["Error"]


# -- annotations the grouper reads ----------------------------------------------------------------

ANNOTATIONS = [
    TOPOLOGY_ANNOTATION,
    n.KAI_REQUIRED,
    n.KAI_PREFERRED,
    n.KAI_SEGMENT_SIZE,
    n.KAI_SEGMENT_REQUIRED,
    n.KAI_SEGMENT_PREFERRED,
    n.KAI_POD_INDEX_LABEL,
    n.KUEUE_REQUIRED,
    n.KUEUE_PREFERRED,
    n.KUEUE_UNCONSTRAINED,
    n.KUEUE_SLICE_REQUIRED,
    n.KUEUE_SLICE_SIZE,
    n.KUEUE_SLICE_CONSTRAINTS,
    lws_kind.EXCLUSIVE,
    lws_kind.SUBGROUP_EXCLUSIVE,
    jobset_kind.EXCLUSIVE,
    POD_GROUP_ANNOTATION,
]
values = st.one_of(
    st.sampled_from(["rack", "zone", "block", "default", "nope", "0", "-1", "2", "4", "true", "", "[]", "{}"]),
    st.integers(min_value=-5, max_value=10**12).map(str),
    json_values.map(lambda v: orjson.dumps(v).decode()),
    st.text(max_size=16),
)
annotation_maps = st.dictionaries(st.sampled_from(ANNOTATIONS), values, max_size=4)
workloads = st.sampled_from(["job", "tfjob", "lws", "jobset"])


def fuzzed(kind: str, on_template: dict[str, str], on_workload: dict[str, str]) -> dict[str, Any]:
    if kind == "job":
        return job(parallelism=4, ann=on_template, annotations=on_workload, name="bad")
    if kind == "tfjob":
        return kubeflow("TFJob", {"Worker": (4, on_template)}, name="bad", annotations=on_workload)
    if kind == "lws":
        return lws(replicas=1, size=4, worker_ann=on_template, annotations=on_workload, name="bad")
    return jobset([("w", 1, 4)], ann={"w": on_template}, annotations=on_workload, name="bad")


GOOD = job(parallelism=4, ann={n.KAI_REQUIRED: "rack"}, name="good")
GOOD_ALONE = group_pods(pods_of(GOOD)[0], ObjectIndex([GOOD, *pods_of(GOOD)[1]]), {})


def cluster() -> GangScheduler:
    state = ClusterState()
    for node in grid(racks=2, nodes=4):
        state.upsert_node(node)
    state.set_topology("default", TOPO)
    return GangScheduler(state)


@FUZZ
@given(kind=workloads, on_template=annotation_maps, on_workload=annotation_maps)
def test_bad_annotations_never_raise_and_never_block_another_gang(
    kind: str, on_template: dict[str, str], on_workload: dict[str, str]
) -> None:
    bad = fuzzed(kind, on_template, on_workload)
    pods, owners = pods_of(bad, GOOD)
    result = group_pods(pods, ObjectIndex([bad, GOOD, *owners]), {})
    (good_key,) = GOOD_ALONE.groups
    assert result.groups[good_key] == GOOD_ALONE.groups[good_key]
    for grouping in result.groups.values():
        assert grouping.valid or grouping.errors  # an invalid gang says why

    scheduler = cluster()
    for obj in (bad, GOOD, *owners):
        apply_object(scheduler, obj)
    for p in pods:
        scheduler.observe_pod(p)
    good_pods = [p for p in pods if result.pod_group.get(p.key) == good_key]
    nodes = [node.name for node in grid(racks=2, nodes=4)]
    for p in pods:
        if p not in good_pods:
            scheduler.filter(p, nodes, now=1.0)  # the bad gang first: refused or placed, never raising
    planned = scheduler.filter(good_pods[0], nodes, now=1.0)
    # Two racks of 4 nodes x 8 GPUs: room for the good gang beside any placed gang, except one
    # that validly asked for a whole zone (or rack) to itself.
    exclusive = {lws_kind.EXCLUSIVE, lws_kind.SUBGROUP_EXCLUSIVE, jobset_kind.EXCLUSIVE} & {*on_template, *on_workload}
    placed_bad = any(g != good_key for g in scheduler.plans)
    if not (placed_bad and exclusive):
        assert len(planned.nodes) == 1, planned.reason


# -- PodGroup, Topology, ResourceInterface parsing ----------------------------------------------------

levels = st.one_of(st.sampled_from(["zone", "rack", "block", "example.com/topology-rack", ""]), json_values)
constraint = keyed(
    {
        "topology": maybe(st.sampled_from(["default", "other"])),
        "requiredTopologyLevel": levels,
        "preferredTopologyLevel": levels,
    }
)
counts = st.one_of(st.integers(min_value=-3, max_value=10), json_values)
subgroup = keyed(
    {
        "name": names,
        "parent": names,
        "minMember": counts,
        "minSubGroup": counts,
        "topologyConstraint": constraint,
    }
)
podgroup_spec = keyed(
    {
        "minMember": counts,
        "minSubGroup": counts,
        "subGroups": maybe(st.lists(subgroup, max_size=4)),
        "topologyConstraint": constraint,
        "topologyConstraints": keyed(
            {
                "global": constraint,
                "subGroups": maybe(st.dictionaries(st.text(max_size=6), constraint, max_size=3)),
                "subGroupSets": maybe(
                    st.lists(keyed({"subGroups": maybe(st.lists(names, max_size=3)), "constraint": constraint}))
                ),
            }
        ),
        "queue": names,
        "priorityClassName": names,
        "markUnschedulable": json_values,
        "schedulingBackoff": json_values,
    }
)
podgroups = keyed({"apiVersion": json_values, "kind": json_values, "metadata": metadata, "spec": podgroup_spec})
topologies = keyed(
    {
        "metadata": metadata,
        "spec": keyed({"levels": maybe(st.lists(keyed({"nodeLabel": names, "alias": names}), max_size=5))}),
    }
)


def parses_or_names_the_problem(parse: Callable[[Any], object], body: Any) -> bool:
    """True when BODY parses, or raises InvalidObject with at least one field error; any other
    exception propagates and fails the test."""
    try:
        parse(body)
    except InvalidObject as exc:
        return bool(exc.errors)
    return True


@FUZZ
@given(body=podgroups)
def test_podgroup_parsing_returns_or_names_the_problem(body: Any) -> None:
    assert parses_or_names_the_problem(parse_podgroup, body if isinstance(body, dict) else {"spec": body})


@FUZZ
@given(body=topologies)
def test_topology_parsing_returns_or_names_the_problem(body: Any) -> None:
    assert parses_or_names_the_problem(parse_topology, body if isinstance(body, dict) else {"spec": body})


ri_subgroup = keyed(
    {
        "componentName": names,
        "foreach": st.one_of(st.sampled_from([".spec.x[] as $x", ".spec.workerGroupSpecs[] as $wg", "["]), names),
        "podClassifier": keyed(
            {
                "matchLabels": maybe(st.dictionaries(st.text(max_size=8), names, max_size=2)),
                "matchExpressions": maybe(
                    st.lists(keyed({"key": names, "operator": names, "valuePath": names, "values": json_values}))
                ),
            }
        ),
        "minReplicas": names,
        "minReplicasPath": maybe(st.lists(st.sampled_from(["$wg.minReplicas", ".spec.x", "$", "..", "$wg["]))),
    }
)
resource_interfaces = st.fixed_dictionaries(
    {"apiVersion": st.just(n.RESOURCE_INTERFACE_API), "kind": st.just(n.RESOURCE_INTERFACE_KIND)},
    optional={
        "metadata": keyed({"name": names}),
        "spec": keyed(
            {
                "targetGVK": maybe(
                    st.fixed_dictionaries({"group": st.just("batch"), "version": st.just("v1"), "kind": st.just("Job")})
                ),
                "gangScheduling": keyed(
                    {
                        "podGroups": maybe(
                            st.lists(
                                keyed({"name": names, "subgroups": maybe(st.lists(ri_subgroup, max_size=3))}),
                                max_size=2,
                            )
                        )
                    }
                ),
            }
        ),
    },
)


@FUZZ
@given(ri=resource_interfaces)
# Found by this test (a metadata that is not an object stopped all grouping):
@example(ri={"apiVersion": n.RESOURCE_INTERFACE_API, "kind": n.RESOURCE_INTERFACE_KIND, "metadata": True})
def test_a_bad_resource_interface_never_raises_nor_blocks_other_workloads(ri: Any) -> None:
    """The fuzzed ResourceInterface targets batch/v1 Job (when it names a target at all): the Job
    it takes over is Invalid or grouped by it; the TFJob beside it is grouped as ever."""
    other = kubeflow("TFJob", {"Worker": 4}, name="other")
    target = job(parallelism=2, name="target")
    pods, owners = pods_of(other, target)
    result = group_pods(pods, ObjectIndex([other, target, *owners, ri]), {})
    alone = group_pods(pods_of(other)[0], ObjectIndex([other, *pods_of(other)[1]]), {})
    (key,) = alone.groups
    assert result.groups[key] == alone.groups[key]


@FUZZ
@given(spec=podgroup_spec)
def test_a_bad_podgroup_never_blocks_another_gang(spec: Any) -> None:
    """A fuzzed PodGroup and three pods naming it go through the scheduler first (Invalid,
    incomplete, pending or placed); the valid Job's gang is planned after them."""
    scheduler = cluster()
    body = {
        "apiVersion": "scheduling.topogang.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "bad", "namespace": "ml"},
    }
    apply_object(scheduler, {**body, "spec": spec})
    nodes = [node.name for node in grid(racks=2, nodes=4)]
    for i in range(3):
        member = pod(f"bad-{i}", gpus=1, namespace="ml", group="bad", subgroup=f"s{i % 2}")
        scheduler.observe_pod(member)
        scheduler.filter(member, nodes, now=1.0)
    pods, owners = pods_of(GOOD)
    for obj in (GOOD, *owners):
        apply_object(scheduler, obj)
    for p in pods:
        scheduler.observe_pod(p)
    planned = scheduler.filter(pods[0], nodes, now=1.0)
    assert len(planned.nodes) == 1, planned.reason


pack = maybe(keyed({"packConstraint": maybe(keyed({"required": names, "preferred": names}))}))
podgang_specs = maybe(
    keyed(
        {
            "podgroups": maybe(
                st.lists(
                    keyed(
                        {
                            "name": st.one_of(st.sampled_from(["llm-0-frontend", "llm-0-prefill-0-leader"]), names),
                            "minReplicas": st.one_of(st.integers(-2, 4), json_values),
                            "podReferences": maybe(
                                st.lists(keyed({"namespace": st.one_of(st.just("ml"), names), "name": names}))
                            ),
                            "topologyConstraint": pack,
                        }
                    ),
                    max_size=3,
                )
            ),
            "topologyConstraint": pack,
            "topologyConstraintGroupConfigs": maybe(
                st.lists(keyed({"name": names, "podGroupNames": maybe(st.lists(names)), "topologyConstraint": pack}))
            ),
        }
    )
)


@FUZZ
@given(
    spec=podgang_specs,
    annotations=maybe(st.dictionaries(st.sampled_from([*ANNOTATIONS, "grove.io/topology-name"]), names, max_size=3)),
)
def test_a_bad_podgang_never_raises_nor_blocks_other_workloads(spec: Any, annotations: Any) -> None:
    """Grove's PodGang llm-0 with any spec: its gang is grouped or Invalid; the TFJob beside it
    is grouped as ever."""
    from tests.test_grouping_grove import pcs

    grove = pcs(sg_replicas=2)
    other = kubeflow("TFJob", {"Worker": 4}, name="other")
    pods, owners = pods_of(grove, other)
    podgang = next(o for o in owners if o["kind"] == "PodGang")
    fuzzed = {**podgang, "metadata": {**podgang["metadata"], "annotations": annotations}, "spec": spec}
    result = group_pods(pods, ObjectIndex([grove, other, *owners, fuzzed]), {})
    alone = group_pods(pods_of(other)[0], ObjectIndex([other, *pods_of(other)[1]]), {})
    (key,) = alone.groups
    assert result.groups[key] == alone.groups[key]
    assert "ml/podgang-llm-0" in result.groups
