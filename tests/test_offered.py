from extender.core.decisions import FilterResult
from extender.core.offered import Offered


def test_offered_answers_for_whichever_node_is_asked() -> None:
    offered = Offered(["n1", "n2", "n3"])
    assert "n2" in offered
    assert "n2" in offered  # the kept answer
    assert "n9" not in offered
    assert "n1" in offered  # another node is looked for again
    assert list(offered) == ["n1", "n2", "n3"]
    assert len(offered) == 3
    assert offered[1] == "n2"
    assert offered[1:] == ["n2", "n3"]


def test_a_refusal_over_offered_names_lists_every_node() -> None:
    refusal = FilterResult.refusal(Offered(["n1", "n2"]), "no")
    assert refusal.unresolvable == {"n1": "no", "n2": "no"}
