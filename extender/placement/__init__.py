"""The placement core: a pure function from a cluster snapshot and a gang to a plan or a reason.

No I/O, no clock, no logging, no asyncio: the same input always gives the same answer. The
server, the simulator and the benchmarks all call `plan()`; nothing else places pods.
"""

from extender.placement.build import BuiltGang, build_gang
from extender.placement.engine import incomplete, meets_minimum, plan
from extender.placement.gang import Gang, Member, Rule, Scope, Shape
from extender.placement.result import Plan, PlanResult, Unplaceable
from extender.placement.snapshot import ClusterSnapshot, NodeTable

__all__ = [
    "BuiltGang",
    "ClusterSnapshot",
    "Gang",
    "Member",
    "NodeTable",
    "Plan",
    "PlanResult",
    "Rule",
    "Scope",
    "Shape",
    "Unplaceable",
    "build_gang",
    "incomplete",
    "meets_minimum",
    "plan",
]
