"""From the cluster state to the victim search: workloads, priorities, elastic pods, Never.

Cluster: one zone of three racks (z1-b1-r1..r3), 4 nodes of 8 GPUs each.
  rack r1 + r2: `two`, a low-priority gang of 8 pods (one a node)
  rack r3:      `one`, a low-priority gang of 4 pods
The preemptor `urgent`: 4 pods of 8 GPUs on one rack, priority class `high`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from extender.core.apply import apply_object, delete_object
from extender.core.cluster import ClusterState
from extender.core.explain import explain, render
from extender.core.explain_names import Named, resolve
from extender.core.membership import Membership
from extender.core.nomination import Nomination
from extender.core.preempting import Preempting
from extender.core.preemption import find_preemption, running_workloads
from extender.core.scheduler import GangScheduler
from extender.kube.podgroup_status import status_body
from extender.model.budget import parse_budget
from extender.model.errors import InvalidObject
from extender.model.pod import parse_pod
from extender.placement.victims import NoPreemption, Preemption
from tests.builders import TOPO, grid, pod, podgroup

RACK = {"topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}


def cluster(urgent_spec: dict[str, Any] | None = None) -> tuple[ClusterState, Membership]:
    state = ClusterState()
    for n in grid(racks=3, nodes=4):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    state.set_priority_class("low", 10)
    state.set_priority_class("high", 1000)
    nodes = [n.name for n in grid(racks=3, nodes=4)]
    state.set_podgroup("default/two", podgroup({"minMember": 8, "priorityClassName": "low"}, name="two"))
    state.set_podgroup("default/one", podgroup({"minMember": 2, "priorityClassName": "low"}, name="one"))
    spec = {"minMember": 4, "priorityClassName": "high", **RACK, **(urgent_spec or {})}
    state.set_podgroup("default/urgent", podgroup(spec, name="urgent"))
    for i in range(8):
        state.upsert_pod(pod(f"two-{i}", group="two", node_name=nodes[i]))
    for i in range(4):
        state.upsert_pod(replace(pod(f"one-{i}", group="one", node_name=nodes[8 + i]), started=float(i)))
    return state, Membership(state)


def add_urgent(state: ClusterState, spec: dict[str, Any] | None = None) -> None:
    for i in range(4):
        state.upsert_pod(pod(f"urgent-{i}", group="urgent", spec=spec))


def test_workloads_are_the_running_gangs_with_their_priority_and_elastic_pods() -> None:
    state, membership = cluster()
    add_urgent(state)
    got = {w.key: w for w in running_workloads(state, membership, skip="default/urgent")}
    assert set(got) == {"default/two", "default/one"}
    assert got["default/two"].priority == 10
    assert got["default/two"].elastic == frozenset()
    # `one` needs 2 of its 4 pods: the two youngest may go alone
    assert got["default/one"].elastic == {"default/one-2", "default/one-3"}


def test_plain_pods_are_workloads_of_their_own() -> None:
    state, membership = cluster()
    state.upsert_pod(replace(pod("solo", gpus=0), node_name="z1-b1-r1-n1", priority=5))
    got = {w.key: w for w in running_workloads(state, membership)}
    assert got["default/solo"].gang is False
    assert got["default/solo"].priority == 5


def test_the_urgent_gang_evicts_the_one_rack_gang() -> None:
    state, membership = cluster()
    add_urgent(state)
    found = find_preemption(state, membership, "default/urgent")
    assert isinstance(found, Preemption), found
    assert found.victims == ("default/one",)
    assert str(found.domain) == "rack z1/b1/r3"
    assert len(found.pods) == 4


def test_a_never_preemptor_evicts_nothing() -> None:
    state, membership = cluster()
    add_urgent(state, {"preemptionPolicy": "Never"})
    found = find_preemption(state, membership, "default/urgent")
    assert isinstance(found, NoPreemption)
    assert "preemptionPolicy Never" in found.reason


def test_equal_priority_evicts_no_minimum() -> None:
    # Only `one`'s two pods beyond its minimum may go for an equal priority, and a rack needs four.
    state, membership = cluster()
    state.set_priority_class("high", 10)
    add_urgent(state)
    found = find_preemption(state, membership, "default/urgent")
    assert isinstance(found, NoPreemption)
    assert found.reason == (
        "evicting every workload below priority 10 and every pod beyond a minimum at it would not free room"
        " for the minimum in any rack"
    )


def test_a_pod_says_when_it_started_and_whether_it_may_preempt() -> None:
    body = {
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [], "preemptionPolicy": "Never"},
        "status": {"startTime": "2026-01-01T00:00:10Z"},
    }
    p = parse_pod(body)
    assert p.preemption_policy == "Never"
    assert p.started == 1767225610.0


# -- the nomination -----------------------------------------------------------------------------------


def test_a_preemption_holds_the_room_until_the_victims_go() -> None:
    state, membership = cluster()
    add_urgent(state)
    pre = Preempting(state, membership, timeout=30)
    nom = pre.attempt("default/urgent", now=0)
    assert isinstance(nom, Nomination)
    rack3 = {f"z1-b1-r3-n{i}" for i in range(1, 5)}
    assert set(nom.reserved.values()) == rack3
    assert {node for node, _ in state.reservations.values()} == rack3
    for i in range(3):
        assert pre.gone(f"default/one-{i}") is None
        state.delete_pod(f"default/one-{i}")
    assert pre.gone("default/one-3") == "default/urgent"
    assert pre.settle("default/urgent") is not None
    assert state.reservations == {}


def test_victims_being_evicted_are_not_chosen_again() -> None:
    state, membership = cluster()
    add_urgent(state)
    state.set_podgroup("default/second", podgroup({"minMember": 4, "priorityClassName": "high", **RACK}, name="second"))
    for i in range(4):
        state.upsert_pod(pod(f"second-{i}", group="second"))
    pre = Preempting(state, membership, timeout=30)
    assert isinstance(pre.attempt("default/urgent", now=0), Nomination)
    second = pre.attempt("default/second", now=0)
    assert isinstance(second, Nomination), second
    assert second.preemption.victims == ("default/two",)  # `one` is taken; `two` frees racks r1 and r2


def test_a_fruitless_search_is_not_repeated_until_something_changes_and_time_passes() -> None:
    state, membership = cluster()
    state.set_priority_class("high", 10)
    add_urgent(state)
    pre = Preempting(state, membership, timeout=30, retry=5)
    assert isinstance(pre.attempt("default/urgent", now=0), NoPreemption)
    assert pre.attempt("default/urgent", now=10) is None  # nothing changed
    state.upsert_pod(replace(pod("solo", gpus=0), node_name="z1-b1-r1-n1"))
    assert pre.attempt("default/urgent", now=1) is None  # too soon
    assert isinstance(pre.attempt("default/urgent", now=10), NoPreemption)


def test_a_nomination_whose_victims_stay_is_released() -> None:
    state, membership = cluster()
    add_urgent(state)
    pre = Preempting(state, membership, timeout=30)
    pre.attempt("default/urgent", now=0)
    assert pre.expire(now=20) == []
    (late,) = pre.expire(now=31)
    assert late.group == "default/urgent"
    assert state.reservations == {}


# -- in the scheduler ---------------------------------------------------------------------------------


def scheduler() -> GangScheduler:
    state, _ = cluster()
    sched = GangScheduler(state, preemption_timeout=30)
    for i in range(4):
        sched.observe_pod(pod(f"urgent-{i}", group="urgent"))
    return sched


NODES = [n.name for n in grid(racks=3, nodes=4)]


def test_a_gang_that_does_not_fit_preempts_then_binds_where_its_victims_were() -> None:
    sched = scheduler()
    first = sched.filter(sched.state.pods["default/urgent-0"], NODES, 0.0)
    assert first.event is not None
    assert first.event.outcome == "preempting"
    assert first.event.preemption is not None
    assert first.event.preemption.victims == ("default/one",)
    assert first.event.fields()["preemption"] == {
        "domain": "rack z1/b1/r3",
        "victims": ["default/one"],
        "elastic": {},
        "victim_pods": 4,
        "top_priority": 10,
        "plans": first.event.preemption.plans,
    }
    status = sched.status("default/urgent")
    assert (status.phase, status.reason) == ("Pending", "Preempting")
    assert "preempting in rack z1/b1/r3: evicting 1 workload(s) (default/one)" in status.message
    again = sched.filter(sched.state.pods["default/urgent-1"], NODES, 1.0)
    assert again.nodes == []
    assert "0/4 victim pods gone" in again.reason
    # a plain pod may not take the room held
    plain = sched.filter(replace(pod("plain"), priority=5000), ["z1-b1-r3-n1"], 1.0)
    assert plain.nodes == []
    for i in range(4):
        sched.delete_pod(f"default/one-{i}")
    assert sched.preempting.take_ready() == ["default/urgent"]
    placed = sched.filter(sched.state.pods["default/urgent-0"], NODES, 2.0)
    assert placed.event is not None
    assert placed.event.outcome == "planned"
    assert set(sched.plans["default/urgent"].reserved.values()) == {f"z1-b1-r3-n{i}" for i in range(1, 5)}


def test_victims_that_stay_release_the_room_with_a_reason() -> None:
    sched = scheduler()
    sched.filter(sched.state.pods["default/urgent-0"], NODES, 0.0)
    assert sched.expire_preemptions(10.0) == []
    (late,) = sched.expire_preemptions(31.0)
    assert late.group == "default/urgent"
    assert sched.state.reservations == {}
    status = sched.status("default/urgent")
    assert status.reason == "PreemptionTimeout"
    assert "4 victim pod(s) did not leave within 30s" in status.message
    assert status.unschedulable


def test_kube_schedulers_preempt_call_starts_the_gang_preemption() -> None:
    sched = scheduler()
    event = sched.preempt("default/urgent-2", 0.0)
    assert event is not None
    assert event.outcome == "preempting"
    assert sched.preempt("default/urgent-3", 0.0) is None  # already under way
    assert sched.preempt("default/one-0", 0.0) is None  # a running gang's pod: nothing to do


def test_the_sweep_forgets_the_fruitless_searches_of_gangs_that_are_gone() -> None:
    sched = scheduler()
    sched.state.set_priority_class("high", 10)  # nobody runs below it: no victims
    assert sched.filter(sched.state.pods["default/urgent-0"], NODES, 0.0).nodes == []
    assert "default/urgent" in sched.preempting.last
    sched.expire(1.0)
    assert "default/urgent" in sched.preempting.last  # still there: remembered
    for i in range(4):
        sched.delete_pod(f"default/urgent-{i}")
    sched.state.set_podgroup("default/urgent", None)
    sched.expire(2.0)
    assert (sched.preempting.last, sched.preempting._tried) == ({}, {})


def test_explain_shows_the_preemption_and_why_those_victims() -> None:
    sched = scheduler()
    dry = render([explain(sched, "default/urgent")])
    assert "Preemption: would evict in rack z1/b1/r3:" in dry
    assert "victims, evicted whole: default/one" in dry
    assert "why these: the least costly in rack z1/b1/r3 (1 workload(s), 4 pod(s), priority <= 10" in dry
    sched.filter(sched.state.pods["default/urgent-0"], NODES, 0.0)
    under_way = render([explain(sched, "default/urgent")])
    assert "Preemption: under way: preempting in rack z1/b1/r3: evicting 1 workload(s) (default/one)" in under_way


def test_explain_says_when_preemption_would_not_help() -> None:
    sched = scheduler()
    sched.state.set_priority_class("high", 5)
    text = render([explain(sched, "default/urgent")])
    assert "Preemption: would not help: no running workload has a priority below 5" in text


# -- PodDisruptionBudgets -------------------------------------------------------------------------------


def pdb(name: str, selector: dict[str, Any] | None, allowed: int = 0) -> dict[str, Any]:
    spec = {} if selector is None else {"selector": selector}
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minAvailable": 1, **spec},
        "status": {"disruptionsAllowed": allowed},
    }


def twin_racks() -> GangScheduler:
    """Racks r1 and r2 each run a 4-pod gang of priority 10 (a, b); r3 runs priority 2000."""
    state = ClusterState()
    for n in grid(racks=3, nodes=4):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    state.set_priority_class("low", 10)
    state.set_priority_class("top", 2000)
    state.set_priority_class("high", 1000)
    sched = GangScheduler(state)
    for name, rack, pc in (("a", 1, "low"), ("b", 2, "low"), ("c", 3, "top")):
        state.set_podgroup(f"default/{name}", podgroup({"minMember": 4, "priorityClassName": pc}, name=name))
        for i in range(4):
            p = pod(f"{name}-{i}", group=name, node_name=f"z1-b1-r{rack}-n{i + 1}", labels={"app": name})
            sched.observe_pod(p)
    state.set_podgroup("default/urgent", podgroup({"minMember": 4, "priorityClassName": "high", **RACK}, name="urgent"))
    for i in range(4):
        sched.observe_pod(pod(f"urgent-{i}", group="urgent"))
    return sched


def test_a_disruption_budget_breaks_the_tie_between_equal_victims() -> None:
    sched = twin_racks()
    first = find_preemption(sched.state, sched.membership, "default/urgent")
    assert isinstance(first, Preemption)
    assert first.victims == ("default/a",)  # equal costs: the first in path order
    apply_object(sched, pdb("keep-a", {"matchLabels": {"app": "a"}}))
    found = find_preemption(sched.state, sched.membership, "default/urgent")
    assert isinstance(found, Preemption)
    assert found.victims == ("default/b",)
    assert found.cost.budgets == 0
    delete_object(sched, pdb("keep-a", None))
    assert sched.state.budgets == {}


def test_disruption_budget_selectors() -> None:
    labels = {"app": "a", "tier": "web"}
    assert parse_budget(pdb("all", {})).selects("default", labels)
    assert not parse_budget(pdb("none", None)).selects("default", labels)
    assert not parse_budget(pdb("all", {})).selects("other", labels)
    exprs = {
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["web"]},
            {"key": "x", "operator": "DoesNotExist"},
        ]
    }
    assert parse_budget(pdb("expr", exprs)).selects("default", labels)
    notin = {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["a"]}]}
    assert not parse_budget(pdb("notin", notin)).selects("default", labels)
    bad = {"matchExpressions": [{"key": "app", "operator": "Equals"}]}
    with pytest.raises(InvalidObject) as caught:
        parse_budget(pdb("bad", bad))
    assert "PodDisruptionBudget default/bad: spec.selector.matchExpressions[0].operator: expected one of In" in str(
        caught.value
    )


def test_a_gang_only_protected_victims_could_make_room_for_waits_and_evicts_nothing() -> None:
    sched = twin_racks()
    apply_object(sched, pdb("keep-a", {"matchLabels": {"app": "a"}}))
    apply_object(sched, pdb("keep-b", {"matchLabels": {"app": "b"}}))
    first = sched.filter(sched.state.pods["default/urgent-0"], NODES, 0.0)
    assert first.event is not None
    assert (first.event.outcome, first.event.preemption) == ("pending", None)
    assert first.event.fields()["disruption_budgets"] == {"default/keep-a": {"allowed": 0, "over": 4}}
    assert sched.preempting.nomination("default/urgent") is None
    assert sched.state.reservations == {}  # no room held, no victim to evict
    status = sched.status("default/urgent")
    assert (status.phase, status.reason, status.unschedulable) == ("Pending", "DisruptionBudget", True)
    said = "preempting would overrun PodDisruptionBudget default/keep-a by 4 pod(s) (it allows 0 now)"
    assert said in status.message
    assert said in first.reason  # what the members are refused with
    text = render([explain(sched, "default/urgent")])
    assert f"Preemption: would evict nothing: {said}" in text
    # The disruption controller writes the same allowance again: nobody is told, nothing searched.
    version = sched.state.version
    apply_object(sched, pdb("keep-a", {"matchLabels": {"app": "a"}}))
    assert sched.state.version == version
    again = sched.filter(sched.state.pods["default/urgent-1"], NODES, 1.0)
    assert again.event is not None
    assert again.event.outcome == "pending"
    # b's budget now allows its four pods to go: the next member searches again at once.
    apply_object(sched, pdb("keep-b", {"matchLabels": {"app": "b"}}, allowed=4))
    after = sched.filter(sched.state.pods["default/urgent-2"], NODES, 2.0)
    assert after.event is not None
    assert after.event.outcome == "preempting"
    assert after.event.preemption is not None
    assert after.event.preemption.victims == ("default/b",)
    assert after.event.preemption.guarded == tuple(f"default/b-{i}" for i in range(4))
    assert sched.status("default/urgent").reason == "Preempting"


def test_the_victims_are_remembered_with_whom_they_made_room_for_and_when() -> None:
    """Once evicted, a victim gang has no pods, and no gang to look at: the scheduler keeps what
    evicted it (bounded), so `explain` still answers for it, by its name or a pod's."""
    sched = scheduler()
    sched.filter(sched.state.pods["default/urgent-0"], NODES, 7.0)
    for i in range(4):
        sched.delete_pod(f"default/one-{i}")
    sched.refresh_reservations(8.0, 1_764_000_008.0)  # the pass that gives the scheduler's clock a wall clock
    assert not sched.lookup.has_pods("default/one")
    evicted = "\n".join(
        [
            "default/one  (PodGroup default/one)  Evicted",
            "  none of its pods exists now; its workload may create them again",
            "  Asked about pod default/one-3: evicted (it no longer exists)",
            "  Evicted: preempted at 2025-11-24T16:00:07Z by default/urgent, for rack z1/b1/r3: 4 pod(s) evicted"
            " (default/one-0, default/one-1, default/one-2, default/one-3); the victims in all: 1 workload(s), 4"
            " pod(s), priority <= 10, taking nvidia.com/gpu 32, cpu 4",
        ]
    )
    assert render([explain(sched, "default/one", "default/one-3")]) == evicted + "\n"


def test_the_eviction_is_kept_in_the_podgroup_status_and_explain_on_a_live_cluster_reads_it() -> None:
    """`explain` against a live cluster builds a scheduler of its own, with no memory of what the
    leader evicted: the leader writes it in the victim's PodGroup status, and explain reads it."""
    sched = scheduler()
    sched.filter(sched.state.pods["default/urgent-0"], NODES, 7.0)
    for i in range(4):
        sched.delete_pod(f"default/one-{i}")
    message = (
        "preempted by default/urgent, for rack z1/b1/r3: 4 pod(s) evicted (default/one-0, default/one-1,"
        " default/one-2, default/one-3); the victims in all: 1 workload(s), 4 pod(s), priority <= 10, taking"
        " nvidia.com/gpu 32, cpu 4"
    )
    status = sched.status("default/one")
    assert status.last_eviction == message
    body = status_body(status, None, "2026-11-23T18:00:00Z")
    assert body["lastEviction"] == {"message": message, "time": "2026-11-23T18:00:00Z"}
    assert status_body(status, body, "2026-11-23T18:05:00Z")["lastEviction"]["time"] == "2026-11-23T18:00:00Z"
    fresh = GangScheduler(ClusterState())  # what `explain` builds from the cluster: no pods of `one` any more
    pg = {"apiVersion": "scheduling.topogang.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "one"}}
    apply_object(fresh, {**pg, "spec": {"minMember": 2}, "status": {"lastEviction": body["lastEviction"]}})
    assert resolve(fresh, "default/one") == Named(("default/one",))
    assert render([explain(fresh, "default/one")]) == (
        "default/one  (PodGroup default/one)  Evicted\n"
        "  none of its pods exists now; its workload may create them again\n"
        f"  Evicted: {message} (at 2026-11-23T18:00:00Z)\n"
    )
    delete_object(fresh, pg)  # the PodGroup goes: what its status said goes with it
    assert resolve(fresh, "default/one").groups == ()
