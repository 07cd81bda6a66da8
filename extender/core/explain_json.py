"""`topogang explain -o json`: the same content as the text, as one documented structure.

    {"apiVersion": "topogang.io/explain/v1", "gangs": [GANG, ...]}

Each GANG holds the fields below (docs/cli.md's `explain -o json` section lists them); a field that does
not apply is null or empty, never absent, so a reader can rely on every key. Fields are only
ever added to v1; a change of meaning would be a v2.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from extender.core.explain import Explanation
from extender.core.explain_why import why_json
from extender.placement import Excluded

API_VERSION = "topogang.io/explain/v1"


def document(explanations: Sequence[Explanation]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "gangs": [gang_json(e) for e in explanations]}


def gang_json(e: Explanation) -> dict[str, Any]:
    asked = e.asked
    return {
        "gang": e.group,
        "source": e.source or None,
        "phase": e.phase,
        "message": e.message,
        "topology": e.topology or None,
        "asked": None
        if asked is None
        else {"pod": asked.pod, "scope": asked.scope or None, "state": asked.state, "node": asked.node or None}
        | {"note": asked.note or None},
        "scopes": [
            {
                "depth": line.depth,
                "label": line.label,
                "minimum": line.minimum,
                "constraint": line.constraint or None,
                "present": line.present,
                "planned": line.planned,
                "bound": line.bound,
                "where": list(line.where),
            }
            for line in e.lines
        ],
        "planning": e.outcome or None,
        "why": why_json(e.why),
        "leftOut": [
            {"shape": shape, "nodes": [{"reason": str(why), "count": n} for why, n in _by_count(reasons)]}
            for shape, reasons in e.left_out.items()
        ],
        "devices": list(e.devices),
        "preemption": list(e.preemption),
        "defragmentation": list(e.defragmentation),
        "lastRepair": e.last_repair or None,
        "reservation": e.reservation or None,
        "overdue": e.overdue or None,
        "queue": e.queue or None,
        "assumed": e.assumed or None,
        "evicted": _evicted(e),
        "preemptedForIt": list(e.evicted_for),
        "notes": list(e.notes),
    }


def _evicted(e: Explanation) -> dict[str, Any] | None:
    """What evicted it last: the record of this process, else (a live cluster) the status's words."""
    evicted = e.eviction
    if evicted is None:
        told = {"workload": e.group, "pods": [], "message": e.evicted}
        return dict.fromkeys(_EVICTED_FIELDS) | told if e.evicted else None
    return {
        "workload": evicted.workload,
        "cause": evicted.cause,
        "by": evicted.by,
        "what": evicted.what,
        "pods": list(evicted.pods),
        "podCount": evicted.count,
        "whole": evicted.whole,
        "time": e.evicted_time,  # RFC 3339; null when no wall clock is known
        "when": e.evicted_at,
        "for": evicted.where or None,
        "message": e.evicted,
    }


_EVICTED_FIELDS = ("workload", "cause", "by", "what", "pods", "podCount", "whole", "time", "when", "for", "message")


def _by_count(reasons: Mapping[Excluded, int]) -> list[tuple[Excluded, int]]:
    """Most nodes first, then by the reason's text (as the text output lists them)."""
    return sorted(reasons.items(), key=lambda kv: (-kv[1], str(kv[0])))
