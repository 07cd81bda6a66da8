"""The extender wire types: what kube-scheduler sends and what it accepts back."""

from __future__ import annotations

import orjson
import pytest

from extender.server import wire

POD = {"metadata": {"name": "p", "namespace": "ml", "uid": "u1"}, "spec": {"containers": []}}


def test_node_names_request_and_reply() -> None:
    args = wire.decode_args(orjson.dumps({"Pod": POD, "Nodes": None, "NodeNames": ["a", "b"]}))
    assert (args.pod_key, args.names, args.nodes) == ("ml/p", ["a", "b"], None)
    reply = orjson.loads(wire.encode_filter(args, ["b"], {"a": "no"}, {}))
    assert reply == {
        "Nodes": None,
        "NodeNames": ["b"],
        "FailedNodes": {"a": "no"},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }


def test_an_empty_answer_is_an_empty_list_not_null() -> None:
    args = wire.decode_args(orjson.dumps({"Pod": POD, "NodeNames": ["a"]}))
    assert orjson.loads(wire.encode_filter(args, [], {}, {"a": "gang incomplete"}))["NodeNames"] == []


def test_full_nodes_request_gets_full_nodes_back() -> None:
    nodes = {"items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}, "status": {}}]}
    args = wire.decode_args(orjson.dumps({"pod": POD, "nodes": nodes}))  # Go decodes keys case-insensitively
    assert args.names == ["a", "b"]
    reply = orjson.loads(wire.encode_filter(args, ["b"], {}, {}))
    assert reply["Nodes"] == {"items": [{"metadata": {"name": "b"}, "status": {}}]}
    assert reply["NodeNames"] is None


@pytest.mark.parametrize(
    ("body", "want"),
    [
        (b"{", "ExtenderArgs: the body is not JSON"),
        (b"[]", "ExtenderArgs: expected a JSON object, got list"),
        (b'{"NodeNames": []}', "ExtenderArgs.Pod: expected a Pod object"),
        (b'{"Pod": {"metadata": {}}}', "ExtenderArgs.Pod.metadata.name: expected the pod's name"),
        (orjson.dumps({"Pod": POD, "NodeNames": "a,b"}), "ExtenderArgs.NodeNames: expected a list of node names"),
        (orjson.dumps({"Pod": POD, "NodeNames": ["a", 7]}), "ExtenderArgs.NodeNames: expected a list of node names"),
        (orjson.dumps({"Pod": POD, "Nodes": {"items": [{}]}}), "ExtenderArgs.Nodes.items[0].metadata.name"),
    ],
)
def test_malformed_args_name_the_field(body: bytes, want: str) -> None:
    with pytest.raises(wire.WireError, match=want.replace("[", r"\[").replace("]", r"\]")):
        wire.decode_args(body)


def test_binding_args() -> None:
    args = wire.decode_binding(b'{"PodName": "p", "PodNamespace": "ml", "PodUID": "u", "Node": "n1"}')
    assert (args.pod_key, args.uid, args.node) == ("ml/p", "u", "n1")
    with pytest.raises(wire.WireError, match=r"ExtenderBindingArgs.Node: expected a non-empty string"):
        wire.decode_binding(b'{"PodName": "p", "PodNamespace": "ml", "PodUID": "u"}')
    assert orjson.loads(wire.encode_binding()) == {"Error": ""}


def test_priorities_and_victims() -> None:
    assert orjson.loads(wire.encode_priorities([("n1", 10)])) == [{"Host": "n1", "Score": 10}]
    victim = {"metadata": {"uid": "v1"}}
    key, victims = wire.decode_victims(
        orjson.dumps({"Pod": POD, "NodeNameToVictims": {"n1": {"Pods": [victim], "NumPDBViolations": 1}}})
    )
    assert key == "ml/p"
    assert victims == {"n1": {"Pods": [{"UID": "v1"}], "NumPDBViolations": 1}}
