"""Parsing resource.k8s.io/v1 objects and evaluating their CEL selectors (extender/model/dra)."""

from __future__ import annotations

from typing import Any

import pytest

from extender.model.dra.claims import ALL, parse_claim_template, parse_pod_claims, parse_resource_claim
from extender.model.dra.expressions import Invalid, Unsupported, evaluate, verdict_key
from extender.model.dra.slices import parse_device_class, parse_resource_slice
from extender.model.errors import ErrorList, InvalidObject
from tests.dra_builders import DRIVER, class_body, device_slice, slice_body


def test_a_slice_for_one_node_names_its_devices_with_attributes_under_the_driver_domain() -> None:
    s = device_slice("n1", count=2)
    assert s.where.node_name == "n1"
    assert [d.id for d in s.devices] == [(DRIVER, "n1", "gpu-0"), (DRIVER, "n1", "gpu-1")]
    assert s.devices[0].attributes == ((DRIVER, "index", 0), (DRIVER, "model", "H100"))


def test_slices_shared_by_nodes_reach_the_nodes_their_selector_or_allnodes_says() -> None:
    selector = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}]}
    by_rack = device_slice(None, nodeSelector=selector)
    everywhere = device_slice(None, allNodes=True)
    assert by_rack.where.reaches("a", {"rack": "r1"})
    assert not by_rack.where.reaches("b", {"rack": "r2"})
    assert everywhere.where.reaches("b", {})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(
            {"nodeName": "n1", "allNodes": True}, "spec: expected one of nodeName, nodeSelector", id="two-wheres"
        ),
        pytest.param({"nodName": "n1"}, "spec.nodName: unknown field; did you mean nodeName?", id="typo"),
        pytest.param({"driver": ""}, "spec.driver: expected a non-empty string", id="no-driver"),
    ],
)
def test_a_bad_slice_is_refused_naming_the_field(change: dict[str, Any], message: str) -> None:
    body = slice_body("n1")
    body["spec"].update(change)
    with pytest.raises(InvalidObject, match=message):
        parse_resource_slice(body)


def test_a_device_attribute_must_have_exactly_one_value() -> None:
    body = slice_body("n1", count=1)
    body["spec"]["devices"][0]["attributes"]["model"] = {"string": "H100", "int": 3}
    with pytest.raises(InvalidObject, match=r"attributes.model: expected exactly one of"):
        parse_resource_slice(body)


def test_a_device_class_keeps_its_selectors_and_extended_resource_name() -> None:
    cls = parse_device_class(class_body(extended="nvidia.com/gpu"))
    assert cls.selectors == (f'device.driver == "{DRIVER}"',)
    assert cls.extended_resource_name == "nvidia.com/gpu"


def test_a_claim_reads_its_requests_and_the_devices_allocated_to_it() -> None:
    body = {
        "metadata": {"name": "c", "namespace": "ml"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpus", "exactly": {"deviceClassName": "gpu", "count": 4}},
                    {"name": "all", "exactly": {"deviceClassName": "nic", "allocationMode": "All"}},
                    {"name": "any", "firstAvailable": [{"name": "big", "deviceClassName": "h200", "count": 2}]},
                ]
            }
        },
        "status": {
            "allocation": {"devices": {"results": [{"request": "gpus", "driver": "d", "pool": "p", "device": "g0"}]}}
        },
    }
    c = parse_resource_claim(body)
    assert [r.name for r in c.spec.requests] == ["gpus", "all", "any"]
    assert c.spec.requests[0].alternatives[0].count == 4
    assert c.spec.requests[1].alternatives[0].mode == ALL
    assert c.spec.requests[2].alternatives[0].class_name == "h200"
    assert c.allocated == (("d", "p", "g0"),)
    assert c.is_allocated


@pytest.mark.parametrize(
    ("request_body", "message"),
    [
        pytest.param({"name": "r"}, "expected exactly one of exactly, firstAvailable", id="neither"),
        pytest.param(
            {"name": "r", "exactly": {"deviceClassName": "g", "count": 0}},
            "count: expected a count of at least 1",
            id="zero",
        ),
        pytest.param(
            {"name": "r", "exactly": {"deviceClassName": "g", "allocationMode": "Some"}},
            "expected ExactCount or All",
            id="mode",
        ),
        pytest.param(
            {"name": "r", "exactly": {"count": 1}}, "deviceClassName: expected the name of a DeviceClass", id="no-class"
        ),
        pytest.param(
            {"name": "r", "exactly": {"deviceClassName": "g", "cuont": 1}},
            "cuont: unknown field; did you mean count",
            id="typo",
        ),
    ],
)
def test_a_bad_template_is_refused_naming_the_field(request_body: dict[str, Any], message: str) -> None:
    body = {"metadata": {"name": "t"}, "spec": {"spec": {"devices": {"requests": [request_body]}}}}
    with pytest.raises(InvalidObject, match=message):
        parse_claim_template(body)


def test_a_pod_names_its_claims_and_the_claims_made_for_it() -> None:
    errors = ErrorList("Pod default/p")
    spec = {
        "resourceClaims": [
            {"name": "gpu", "resourceClaimTemplateName": "t"},
            {"name": "cd", "resourceClaimName": "domain"},
        ]
    }
    status = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x7k2"}]}
    claims = parse_pod_claims(spec, status, errors)
    assert not errors.errors
    assert (claims[0].template_name, claims[0].generated) == ("t", "p-gpu-x7k2")
    assert (claims[1].claim_name, claims[1].generated) == ("domain", None)


DEVICE = device_slice("n1", count=1).devices[0]


@pytest.mark.parametrize(
    ("expression", "want"),
    [
        pytest.param(f'device.driver == "{DRIVER}"', True, id="driver"),
        pytest.param(f'device.attributes["{DRIVER}"].model == "H100"', True, id="attribute"),
        pytest.param(f'device.attributes["{DRIVER}"].index > 0', False, id="false"),
        pytest.param('size(device.attributes["other.example.com"]) == 0', True, id="unknown-domain-is-empty"),
    ],
)
def test_selectors_the_interpreter_can_answer(expression: str, want: bool) -> None:
    assert evaluate(expression, DEVICE) is want


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param(f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0', id="k8s-quantity-library"),
        pytest.param(f'cel.bind(d, device.attributes["{DRIVER}"], d.model == "H100")', id="cel-bind"),
        pytest.param('device.attributes["other.example.com"].model == "x"', id="runtime-no-such-key"),
    ],
)
def test_selectors_it_cannot_answer_are_unsupported_not_false(expression: str) -> None:
    assert isinstance(evaluate(expression, DEVICE), Unsupported)


def test_a_selector_that_does_not_parse_is_invalid() -> None:
    verdict = evaluate("device.driver ==", DEVICE)
    assert isinstance(verdict, Invalid)
    assert "does not compile" in verdict.reason


def test_devices_alike_in_what_a_selector_reads_share_one_evaluation() -> None:
    # Each device has its own uuid; a selector on the model reads only the model.
    body = slice_body("n9", count=3)
    for i, d in enumerate(body["spec"]["devices"]):
        d["attributes"]["uuid"] = {"string": f"GPU-{i}"}
    devices = parse_resource_slice(body).devices
    expression = f'device.attributes["{DRIVER}"].model == "H100"'
    assert {verdict_key(expression, d) for d in devices} == {(DRIVER, False, (((DRIVER, "model"), "H100"),), ())}
    # One that may read a whole map sees every attribute: a verdict per device.
    walking = f'device.attributes["{DRIVER}"].exists(k, k == "uuid")'
    assert len({verdict_key(walking, d) for d in devices}) == 3


def test_alike_values_are_shared_but_never_across_types() -> None:
    body = slice_body("n8", count=2)
    body["spec"]["devices"][0]["attributes"]["flag"] = {"bool": True}
    body["spec"]["devices"][1]["attributes"]["flag"] = {"int": 1}
    first, second = parse_resource_slice(body).devices
    assert first.values[0] is True
    assert second.values[0] == 1
    assert second.values[0] is not True
