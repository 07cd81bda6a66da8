"""Nominations: the room held for a preempting gang, ready when its victims are gone, released
when they do not go in time."""

from __future__ import annotations

from extender.core.nomination import Nominations
from extender.placement import Plan
from extender.placement.victims import Cost, Preemption


def preemption(group: str = "ml/urgent", pods: tuple[str, ...] = ("lo/a-0", "lo/a-1")) -> Preemption:
    cost = Cost(budgets=0, top_priority=10, workloads=1, pods=len(pods), taken=(16000,), recency=0.0)
    plan = Plan(group, {"ml/u-0": "n1", "ml/u-1": "n2"}, {})
    return Preemption(group, "rack z1/b1/r3", ("lo/a",), {}, pods, cost, plan, ("nvidia.com/gpu",))


def test_a_nomination_is_ready_when_its_last_victim_goes() -> None:
    noms = Nominations(timeout=30)
    nom = noms.start(preemption(), now=0)
    assert nom.reserved == {"ml/u-0": "n1", "ml/u-1": "n2"}
    assert noms.evicting() == {"lo/a-0", "lo/a-1"}
    assert noms.gone("lo/a-0") is None
    assert noms.take_ready() == []
    assert noms.gone("lo/a-1") == "ml/urgent"
    assert noms.ready("ml/urgent")
    assert noms.take_ready() == ["ml/urgent"]
    assert noms.take_ready() == []
    assert noms.gone("someone/else") is None


def test_a_nomination_whose_victims_stay_expires() -> None:
    noms = Nominations(timeout=30)
    noms.start(preemption(), now=0)
    noms.gone("lo/a-0")
    assert noms.expired(now=30) == []
    (late,) = noms.expired(now=30.5)
    assert late.pending == {"lo/a-1"}
    assert "ml/urgent" not in noms
    assert noms.evicting() == set()
    assert "1/2 victim pods gone" in late.describe()


def test_victims_already_gone_make_it_ready_at_once() -> None:
    noms = Nominations(timeout=30)
    noms.start(preemption(), now=0, gone={"lo/a-0", "lo/a-1"})
    assert noms.take_ready() == ["ml/urgent"]


def test_dropping_forgets_the_victims() -> None:
    noms = Nominations(timeout=30)
    noms.start(preemption(), now=0)
    assert noms.drop("ml/urgent") is not None
    assert noms.gone("lo/a-0") is None
    assert noms.take_ready() == []
