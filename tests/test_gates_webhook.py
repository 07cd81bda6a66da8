"""Gates mode without a cluster: which pods the webhook gates and what it adds (gate, segment env
vars and label) as a JSONPatch applied to the pod, the ungater's plan and patch, the self-signed
certificate, and the mode's settings."""

from __future__ import annotations

import argparse
import asyncio
import base64
import copy
import datetime
import socket
import ssl
from dataclasses import replace
from typing import Any

import aiohttp
import orjson
import pytest
from cryptography import x509

from extender.core.cluster import ClusterState, object_key
from extender.core.scheduler import GangScheduler
from extender.grouping import ObjectIndex, synthesize
from extender.grouping.admission import admit
from extender.grouping.result import SegmentPosition
from extender.kube.certs import self_signed
from extender.kube.ungate import GATE, Ungater, pin_patch
from extender.model.pod import PINNED_NODE_ANNOTATION, PodInfo, parse_pod
from extender.server.extender import Extender
from extender.server.gates import GatesMode
from extender.server.gates_settings import GatesSettings, add_gates_arguments, gates_settings_from
from extender.server.settings_error import SettingsError
from extender.server.webhook import EXTENDER, GATES, SEGMENT_LABEL, Webhook, gate_ops, segment_ops
from tests.builders import GPU, TOPO, grid, node, pod, podgroup
from tests.grouping_builders import kubeflow, lws, obj, owned_pod
from tests.test_core_defrag import NODES as DEFRAG_NODES
from tests.test_core_defrag import cluster as defrag_cluster

SEG4_RACK = {"kai.scheduler/segment-size": "4", "kai.scheduler/segment-topology-required-placement": "rack"}
TOPO_ANN = {"kai.scheduler/topology": "default"}


def tfjob() -> dict[str, Any]:
    return kubeflow("TFJob", {"Chief": 1, "Worker": (16, SEG4_RACK)}, annotations=TOPO_ANN)


def apply(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 `add`, as the API server applies it (the only op the webhook sends)."""
    out = copy.deepcopy(doc)
    for op in ops:
        assert op["op"] == "add", op
        *parents, last = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        target: Any = out
        for token in parents:
            target = target[int(token)] if isinstance(target, list) else target[token]
        if isinstance(target, list):
            assert last == "-"
            target.append(op["value"])
        else:
            assert last not in target or op["path"].count("/") > 2, f"add would replace {op['path']}"
            target[last] = op["value"]
    return out


def review(webhook: Webhook, raw: dict[str, Any], namespace: str = "ml") -> tuple[dict[str, Any], dict[str, Any]]:
    """(the AdmissionReview response, the pod with its patch applied)."""
    body = {"request": {"uid": "u1", "operation": "CREATE", "namespace": namespace, "object": raw}}
    response = webhook.review(body)["response"]
    assert response["uid"] == "u1"
    assert response["allowed"] is True
    ops = orjson.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    return response, apply(raw, ops)


def cluster_with(*objects: dict[str, Any]) -> GangScheduler:
    state = ClusterState()
    for body in objects:
        meta = body["metadata"]
        state.set_object(object_key(body["apiVersion"], body["kind"], meta.get("namespace"), meta["name"]), body)
    return GangScheduler(state)


def env_of(raw: dict[str, Any], container: int = 0) -> dict[str, str]:
    return {e["name"]: e["value"] for e in raw["spec"]["containers"][container].get("env", [])}


# -- which pods are managed, and their segment -----------------------------------------------------------


def test_admit_reads_gang_and_segment_from_the_grouper() -> None:
    job = tfjob()
    pods = {p["metadata"]["name"]: parse_pod(p) for p in synthesize(job).pods}
    objects = ObjectIndex([job])
    worker = admit(pods["train-worker-6"], objects, {})
    assert worker.managed
    assert worker.gang == "ml/tfjob-train"
    assert worker.segment == SegmentPosition(segment=1, size=4, index_in_segment=2)
    chief = admit(pods["train-chief-0"], objects, {})
    assert chief.managed
    assert chief.segment is None


def test_admit_leaves_plain_pods_and_owners_that_do_not_ask_alone_and_gates_named_podgroups() -> None:
    # A ReplicaSet without gang annotations: its pods are plain (tests/test_plain_owners.py).
    objects = ObjectIndex([obj("apps/v1", "ReplicaSet", "web")])
    assert not admit(owned_pod("plain"), objects, {}).managed
    assert not admit(owned_pod("web-1", ("apps/v1", "ReplicaSet", "web")), objects, {}).managed
    named = admit(owned_pod("p", annotations={"pod-group-name": "pg"}), objects, {"ml/pg": podgroup({}, "pg", "ml")})
    assert named.managed
    assert named.gang == "ml/pg"
    missing = admit(owned_pod("q", annotations={"pod-group-name": "nope"}), objects, {})
    assert missing.managed
    assert "does not exist yet" in missing.waiting
    # A known kind whose object topogang cannot see yet: its gang will be known, so it is gated.
    unseen = admit(owned_pod("w", ("kubeflow.org/v1", "TFJob", "later")), ObjectIndex([]), {})
    assert unseen.managed


def test_admit_follows_a_leaderworkerset_worker_through_its_leader_pod() -> None:
    made = synthesize(lws(1, 4))
    pods = {p.key: p for p in map(parse_pod, made.pods)}
    objects = ObjectIndex([lws(1, 4), *made.owners])
    worker = next(p for k, p in pods.items() if not k.endswith("llm-0"))
    assert admit(worker, objects, {}, pods).managed
    # Without its leader pod the chain stops above the workers' StatefulSet, at a Pod topogang
    # cannot see: an owner nobody knows that does not ask to be a gang, so they are not gated.
    assert not admit(worker, objects, {}, {}).managed


# -- what the webhook adds ---------------------------------------------------------------------------------


def test_gates_mode_gates_a_segmented_worker_and_adds_its_segment() -> None:
    job = tfjob()
    webhook = Webhook(cluster_with(job), GATES, lambda: True)
    raw = next(p for p in synthesize(job).pods if p["metadata"]["name"] == "train-worker-13")
    raw["spec"]["containers"][0]["env"] = [{"name": "KEEP", "value": "1"}, {"name": "KAI_SEGMENT_INDEX", "value": "9"}]
    _, out = review(webhook, raw)
    assert out["spec"]["schedulingGates"] == [{"name": GATE}]
    assert out["metadata"]["labels"][SEGMENT_LABEL] == "3"
    assert env_of(out) == {
        "KEEP": "1",
        "KAI_SEGMENT_INDEX": "9",  # the pod's own value wins
        "TOPOGANG_SEGMENT_INDEX": "3",
        "TOPOGANG_SEGMENT_SIZE": "4",
        "TOPOGANG_INDEX_IN_SEGMENT": "1",
    }


def test_extender_mode_adds_the_segment_but_never_a_gate() -> None:
    job = tfjob()
    webhook = Webhook(cluster_with(job), EXTENDER, lambda: True)
    raw = next(p for p in synthesize(job).pods if p["metadata"]["name"] == "train-worker-0")
    _, out = review(webhook, raw)
    assert "schedulingGates" not in out["spec"]
    assert out["metadata"]["labels"][SEGMENT_LABEL] == "0"
    assert env_of(out)["TOPOGANG_SEGMENT_INDEX"] == "0"


def test_segment_ops_create_the_label_map_and_env_lists_when_absent() -> None:
    raw = {"metadata": {}, "spec": {"initContainers": [{"name": "i"}], "containers": [{"name": "c", "env": []}]}}
    out = apply(raw, segment_ops(raw, SegmentPosition(2, 8, 5)))
    assert out["metadata"]["labels"] == {SEGMENT_LABEL: "2"}
    want = {"TOPOGANG_SEGMENT_INDEX": "2", "TOPOGANG_SEGMENT_SIZE": "8", "TOPOGANG_INDEX_IN_SEGMENT": "5"}
    for kind in ("initContainers", "containers"):
        env = {e["name"]: e["value"] for e in out["spec"][kind][0]["env"]}
        assert env == {**want, "KAI_SEGMENT_INDEX": "2"}


def test_generate_name_pods_and_plain_pods() -> None:
    job = tfjob()
    webhook = Webhook(cluster_with(job), GATES, lambda: True)
    raw = next(p for p in synthesize(job).pods if p["metadata"]["name"] == "train-chief-0")
    raw["metadata"]["generateName"] = raw["metadata"].pop("name")[:-1]
    _, out = review(webhook, raw)
    assert out["spec"]["schedulingGates"] == [{"name": GATE}]
    assert "env" not in out["spec"]["containers"][0]
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    response, out = review(webhook, plain)
    assert "patch" not in response
    assert out == plain


async def test_a_pod_that_arrives_before_its_workload_waits_for_it_to_read_its_segment() -> None:
    job = tfjob()
    scheduler = cluster_with()  # the cache has not seen the TFJob yet
    webhook = Webhook(scheduler, GATES, lambda: True)
    raw = next(p for p in synthesize(job).pods if p["metadata"]["name"] == "train-worker-9")
    body = {"request": {"uid": "u", "operation": "CREATE", "namespace": "ml", "object": raw}}
    key = object_key(job["apiVersion"], job["kind"], "ml", job["metadata"]["name"])
    asyncio.get_running_loop().call_later(0.1, scheduler.state.set_object, key, job)
    response = (await webhook.review_waiting(body))["response"]
    out = apply(raw, orjson.loads(base64.b64decode(response["patch"])))
    assert env_of(out)["TOPOGANG_SEGMENT_INDEX"] == "2"
    assert out["spec"]["schedulingGates"] == [{"name": GATE}]


def test_gate_ops_add_once_and_never_to_a_bound_pod() -> None:
    other = {"spec": {"schedulingGates": [{"name": "example.com/other"}]}}
    assert gate_ops(other) == [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": GATE}}]
    assert gate_ops({"spec": {"schedulingGates": [{"name": GATE}]}}) == []
    assert gate_ops({"spec": {"nodeName": "n1"}}) == []


def test_a_malformed_review_is_an_error_naming_the_field() -> None:
    webhook = Webhook(cluster_with(), GATES, lambda: True)
    with pytest.raises(ValueError, match=r"AdmissionReview\.request\.object"):
        webhook.review({"request": {"uid": "u"}})


# -- the ungater's plan and patch --------------------------------------------------------------------------


def gated_gang(count: int, minimum: int) -> GangScheduler:
    state = ClusterState()
    for n in grid(racks=2, nodes=4):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    spec = {"minMember": minimum, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}
    state.set_podgroup("default/g", podgroup(spec, name="g"))
    scheduler = GangScheduler(state)
    for i in range(count):
        scheduler.observe_pod(pod(f"g-{i}", group="g", spec={"schedulingGates": [{"name": GATE}]}))
    return scheduler


class NoClient:
    async def get(self, path: str) -> dict[str, Any]:
        raise AssertionError("planning makes no API call")

    async def patch(self, path: str, body: Any, *, strategic: bool = False) -> dict[str, Any]:
        raise AssertionError("planning makes no API call")


def test_the_ungater_plans_the_whole_minimum_in_one_rack() -> None:
    scheduler = gated_gang(4, 4)
    planned = Ungater(NoClient(), scheduler).plan("default/g")
    assert sorted(planned) == [f"default/g-{i}" for i in range(4)]
    assert len({n.rsplit("-", 1)[0] for n in planned.values()}) == 1
    assert set(scheduler.state.reservations) == set(planned)


def test_an_infeasible_gang_is_not_ungated_and_keeps_its_reason() -> None:
    scheduler = gated_gang(5, 5)  # a rack has 4 nodes
    assert Ungater(NoClient(), scheduler).plan("default/g") == {}
    assert "the best rack" in scheduler.reasons["default/g"].render()
    assert not scheduler.state.reservations


def test_an_incomplete_gang_is_not_ungated() -> None:
    scheduler = gated_gang(2, 3)
    assert Ungater(NoClient(), scheduler).plan("default/g") == {}
    assert scheduler.status("default/g").reason == "GangIncomplete"


def test_pods_beyond_the_minimum_are_released_as_their_room_is_planned() -> None:
    scheduler = gated_gang(5, 2)  # rack r1 or r2 of 4 nodes: 4 fit in one rack, the 5th does not
    ungater = Ungater(NoClient(), scheduler)
    first = ungater.plan("default/g")
    assert len(first) == 4
    assert len({n.rsplit("-", 1)[0] for n in first.values()}) == 1
    rack = next(iter(first.values())).rsplit("-", 1)[0]
    scheduler.plans["default/g"].gate.opened = True  # what release() does once the patches are out
    for key, where in first.items():  # kube-scheduler binds them where they are pinned
        scheduler.observe_pod(replace(scheduler.state.pods[key], node_name=where, scheduling_gates=()))
    assert ungater.plan("default/g") == {}  # still no room in that rack for the fifth
    r, b, z = rack.split("-")[2][1:], rack.split("-")[1][1:], rack.split("-")[0][1:]
    scheduler.state.upsert_node(node(f"{rack}-n5", f"z{z}", f"b{b}", f"r{r}"))
    (fifth,) = ungater.plan("default/g").items()
    assert fifth == ("default/g-4", f"{rack}-n5")


def test_pin_patch_narrows_existing_terms_and_removes_only_our_gate() -> None:
    p = pod("g-0", group="g")
    patch = pin_patch(p, "n1", [])
    want = {"key": "metadata.name", "operator": "In", "values": ["n1"]}
    terms = patch["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [{"matchFields": [want]}]
    assert patch["spec"]["schedulingGates"] == [{"$patch": "delete", "name": GATE}]
    assert patch["metadata"]["annotations"] == {PINNED_NODE_ANNOTATION: "n1"}  # the pin is topogang's
    own = [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}, {"matchFields": [{"key": "x"}]}]
    narrowed = pin_patch(p, "n1", own)["spec"]["affinity"]["nodeAffinity"]
    terms = narrowed["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{**own[0], "matchFields": [want]}, {"matchFields": [{"key": "x"}, want]}]


# -- moved pods' replacements (defragmentation) ------------------------------------------------------------


def replacement(rs: str = "web", gpus: int = 1, gated: bool = False) -> dict[str, Any]:
    """A pod ReplicaSet RS (uid rs-uid-RS, as tests/test_core_defrag.py's replicas) is creating:
    generateName only, as the API server shows it to the webhook."""
    meta = {
        "generateName": f"{rs}-",
        "namespace": "default",
        "labels": {"app": rs},
        "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": f"rs-uid-{rs}", "controller": True}
        ],
    }
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", GPU: str(gpus)}}}]}
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def created(raw: dict[str, Any], name: str) -> PodInfo:
    """RAW as the cache shows it once created under NAME."""
    meta = {k: v for k, v in raw["metadata"].items() if k != "generateName"}
    return parse_pod({**raw, "metadata": {**meta, "name": name}, "status": {"phase": "Pending"}})


def defragmenting() -> tuple[GangScheduler, str, str]:
    """A gang that moved one replica of ReplicaSet web out of its block: (scheduler, the moved
    pod, the node held for its replacement). The moved pod is gone already."""
    sched = defrag_cluster()
    event = sched.filter(sched.state.pods["default/big-0"], DEFRAG_NODES, 0.0).event
    assert event is not None
    assert event.preemption is not None
    assert event.outcome == "defragmenting"
    ((moved, held),) = event.preemption.moves.items()
    sched.delete_pod(moved)
    return sched, moved, held


class Recording:
    def __init__(self) -> None:
        self.patches: dict[str, dict[str, Any]] = {}

    async def get(self, path: str) -> dict[str, Any]:
        return {}

    async def patch(self, path: str, body: Any, *, strategic: bool = False) -> dict[str, Any]:
        assert strategic
        self.patches[path.rsplit("/", 1)[1]] = body
        return {}


def test_gates_mode_gates_a_pod_that_would_replace_a_moved_pod_and_nothing_else() -> None:
    sched, _, _ = defragmenting()
    webhook = Webhook(sched, GATES, lambda: True)
    _, out = review(webhook, replacement(), namespace="default")
    assert out["spec"]["schedulingGates"] == [{"name": GATE}]
    assert sched.defragmenting.moves.awaiting(created(replacement(), "web-x"), None) is not None  # asked, not claimed
    assert not sched.defragmenting.moves.is_moving("default/web-x")
    for other in (replacement(rs="other"), replacement(gpus=2)):  # another owner; requests beyond the room
        response, _ = review(webhook, other, namespace="default")
        assert "patch" not in response
    elsewhere = replacement()
    elsewhere["metadata"]["namespace"] = "ml"
    response, _ = review(webhook, elsewhere, namespace="ml")  # another namespace
    assert "patch" not in response
    response, _ = review(Webhook(sched, EXTENDER, lambda: True), replacement(), namespace="default")
    assert "patch" not in response  # extender mode: the filter answers it the held node
    # once a replacement claimed the room, a second pod of the same owner is plain again
    assert sched.filter(created(replacement(), "web-c"), DEFRAG_NODES, 1.0).nodes != []
    response, _ = review(webhook, replacement(), namespace="default")
    assert "patch" not in response


async def test_the_ungater_pins_a_gated_replacement_to_its_held_room_and_only_ungates_one_with_no_move() -> None:
    sched, moved, held = defragmenting()
    client = Recording()
    ungater = Ungater(client, sched)
    sched.observe_pod(created(replacement(gated=True), "web-c"))
    sched.observe_pod(created(replacement(gated=True), "web-d"))  # a second one: the room is taken by then
    await ungater.flush()
    assert set(client.patches) == {"web-c", "web-d"}
    uid = sched.state.pods["default/web-c"].uid
    assert client.patches["web-c"] == pin_patch(sched.state.pods["default/web-c"], held, [])
    assert client.patches["web-c"]["metadata"] == {"uid": uid, "annotations": {PINNED_NODE_ANNOTATION: held}}
    assert client.patches["web-d"]["spec"] == {"schedulingGates": [{"$patch": "delete", "name": GATE}]}
    assert sched.state.reservations["default/web-c"][0] == held
    assert sched.defragmenting.moves.is_moving("default/web-c")
    assert not sched.defragmenting.moves.is_moving("default/web-d")
    assert ungater.ungated == 2
    # patched once: the same pods seen gated again (the cache behind) are not patched twice
    client.patches.clear()
    ungater._everything = True
    await ungater.flush()
    assert client.patches == {}
    assert moved not in sched.state.pods


async def test_a_gated_replacement_whose_room_was_given_back_is_ungated_without_a_pin() -> None:
    sched, _, _ = defragmenting()
    assert len(sched.defragmenting.moves.expire(10**9)) == 1  # no replacement came in time
    client = Recording()
    sched.observe_pod(created(replacement(gated=True), "web-c"))
    await Ungater(client, sched).flush()
    assert client.patches == {
        "web-c": {
            "metadata": {"uid": sched.state.pods["default/web-c"].uid},
            "spec": {"schedulingGates": [{"$patch": "delete", "name": GATE}]},
        }
    }


async def test_a_gated_pod_whose_gang_is_not_resolved_yet_stays_gated() -> None:
    sched = cluster_with()
    sched.observe_pod(pod("g-0", group="missing", spec={"schedulingGates": [{"name": GATE}]}))
    client = Recording()
    await Ungater(client, sched).flush()
    assert client.patches == {}


# -- certificates and settings -----------------------------------------------------------------------------


def test_the_self_signed_serving_certificate_chains_to_its_ca_and_names_its_hosts() -> None:
    made = self_signed(["topogang-webhook.topogang-system.svc", "127.0.0.1"])
    ca = x509.load_pem_x509_certificate(made.ca_pem)
    cert = x509.load_pem_x509_certificate(made.cert_pem)
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["topogang-webhook.topogang-system.svc"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC) > datetime.timedelta(days=300)
    with pytest.raises(ValueError, match="at least one"):
        self_signed([])


def parse(argv: list[str], environ: dict[str, str] | None = None) -> Any:
    parser = argparse.ArgumentParser()
    add_gates_arguments(parser)
    return gates_settings_from(parser.parse_args(argv), environ or {})


def test_settings_defaults_per_mode_and_errors_naming_the_flag() -> None:
    extender = parse([])
    assert extender.mode == "extender"
    assert not extender.webhook
    gates = parse(["--mode=gates"], {"POD_NAMESPACE": "tg"})
    assert (gates.webhook_host, gates.webhook_port) == ("0.0.0.0", 9443)
    assert gates.hosts == ("topogang-webhook.tg.svc",)
    assert gates.self_signed
    env_only = parse([], {"TOPOGANG_WEBHOOK_LISTEN": "127.0.0.1:9000", "TOPOGANG_WEBHOOK_HOSTS": "a, 127.0.0.1"})
    assert (env_only.mode, env_only.webhook_port, env_only.hosts) == ("extender", 9000, ("a", "127.0.0.1"))
    with pytest.raises(SettingsError, match="--mode"):
        parse(["--mode=kueue"])
    with pytest.raises(SettingsError, match="--webhook-listen"):
        parse(["--webhook-listen=9443"])
    with pytest.raises(SettingsError, match="both or neither"):
        parse(["--webhook-cert=/c"])


# -- the HTTPS listener ------------------------------------------------------------------------------------


async def test_the_webhook_answers_over_https_with_its_own_ca_and_503_until_synced() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    job = tfjob()
    scheduler = cluster_with(job)
    synced = False
    settings = GatesSettings(mode=GATES, webhook_host="127.0.0.1", webhook_port=port, hosts=("127.0.0.1",))
    extender = Extender(scheduler, None, bind_timeout=1)  # type: ignore[arg-type]
    gates = GatesMode(settings, None, scheduler, extender, lambda: synced)  # type: ignore[arg-type]
    await gates.start()
    try:
        assert gates.cert is not None
        trust = ssl.create_default_context(cadata=gates.cert.ca_pem.decode())
        raw = next(p for p in synthesize(job).pods if p["metadata"]["name"] == "train-worker-5")
        body = {"request": {"uid": "u", "operation": "CREATE", "namespace": "ml", "object": raw}}
        url = f"https://127.0.0.1:{port}/mutate-pods"
        async with aiohttp.ClientSession() as session:
            async with session.post(url, json=body, ssl=trust) as resp:
                assert resp.status == 503  # failurePolicy decides while the caches sync
            synced = True
            async with session.post(url, json=body, ssl=trust) as resp:
                assert resp.status == 200
                answer = await resp.json()
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await session.post(url, json=body, ssl=ssl.create_default_context())
        ops = orjson.loads(base64.b64decode(answer["response"]["patch"]))
        out = apply(raw, ops)
        assert out["spec"]["schedulingGates"] == [{"name": GATE}]
        assert env_of(out)["TOPOGANG_SEGMENT_INDEX"] == "1"
        # every review answered is timed, refusals included: the API server waits for each one
        exposition = extender.metrics.exposition().decode()
        assert 'topogang_webhook_duration_seconds_count{code="503"} 1.0' in exposition
        assert 'topogang_webhook_duration_seconds_count{code="200"} 1.0' in exposition
    finally:
        await gates.close()
