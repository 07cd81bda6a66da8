"""The placement core: a pure function from a cluster snapshot and a gang to a plan or a reason.

No I/O, no clock, no logging, no asyncio: the same input always gives the same answer. The
server, the simulator and the benchmarks all call `plan()`; nothing else places pods. Other
packages import placement through this module only.
"""

from extender.placement.engine import plan
from extender.placement.gang import Gang, Member, Rule, Scope, Shape
from extender.placement.gang_from_podgroup import BuiltGang, build_gang
from extender.placement.leftout import Excluded, Exclusion, left_out
from extender.placement.minimum import incomplete, meets_minimum, minimum_pods, scope_minimum_pods
from extender.placement.ranking import (
    ALLOTTED,
    COMPACT,
    HOLDS_ALL,
    INNER,
    PARTS,
    PATH,
    PREFERRED,
    REQUIRED,
    ROOM,
    SPANS,
    RankedDomain,
    Ranking,
)
from extender.placement.reasons import INCOMPLETE, NO_CAPACITY, NO_DOMAIN, SEARCH_LIMIT, Shortfall
from extender.placement.ref import DomainRef
from extender.placement.relocation import MovedPod, Stranded, closed_domain, relocate
from extender.placement.repair import Repair, plan_repair, unpin
from extender.placement.result import Plan, PlanResult, Unplaceable
from extender.placement.snapshot import ClusterSnapshot, DictUsage, NodeTable
from extender.placement.tree import BoolArray, Domain, IntArray, TopologyTree
from extender.placement.victim_search import find_victims
from extender.placement.victims import (
    Budget,
    Cost,
    NoPreemption,
    Overrun,
    Preemption,
    PreemptionResult,
    RunningPod,
    Workload,
)

__all__ = [
    "ALLOTTED",
    "COMPACT",
    "HOLDS_ALL",
    "INCOMPLETE",
    "INNER",
    "NO_CAPACITY",
    "NO_DOMAIN",
    "PARTS",
    "PATH",
    "PREFERRED",
    "REQUIRED",
    "ROOM",
    "SEARCH_LIMIT",
    "SPANS",
    "BoolArray",
    "Budget",
    "BuiltGang",
    "ClusterSnapshot",
    "Cost",
    "DictUsage",
    "Domain",
    "DomainRef",
    "Excluded",
    "Exclusion",
    "Gang",
    "IntArray",
    "Member",
    "MovedPod",
    "NoPreemption",
    "NodeTable",
    "Overrun",
    "Plan",
    "PlanResult",
    "Preemption",
    "PreemptionResult",
    "RankedDomain",
    "Ranking",
    "Repair",
    "Rule",
    "RunningPod",
    "Scope",
    "Shape",
    "Shortfall",
    "Stranded",
    "TopologyTree",
    "Unplaceable",
    "Workload",
    "build_gang",
    "closed_domain",
    "find_victims",
    "incomplete",
    "left_out",
    "meets_minimum",
    "minimum_pods",
    "plan",
    "plan_repair",
    "relocate",
    "scope_minimum_pods",
    "unpin",
]
