"""The simulation's results as JSON (for programs) or text (a table and a picture of the racks)."""

from __future__ import annotations

from collections import defaultdict

import orjson

from extender.model.keys import GroupKey
from extender.model.node import NodeInfo
from extender.model.topology import TopologySpec
from extender.placement import DomainRef
from extender.simulate.runner import SimResult


def to_json(result: SimResult) -> str:
    doc = {
        "pods": [
            {
                "namespace": p.namespace,
                "name": p.name,
                "labels": p.labels,
                "podGroup": GroupKey.parse(p.group).name if p.group else None,
                "subGroup": p.subgroup,
                "node": p.node,
                "reason": p.reason or None,  # why it is pending; null once placed
            }
            for p in result.pods
        ],
        "podGroups": [
            {
                "namespace": GroupKey.parse(g.key).namespace,
                "name": GroupKey.parse(g.key).name,
                "phase": g.phase,
                "reason": g.reason or None,  # a word for programs: Invalid, GangIncomplete, NoDomain...
                "message": g.message,
            }
            for g in result.groups
        ],
        "preempted": [
            {
                "namespace": GroupKey.parse(v.pod).namespace,
                "name": GroupKey.parse(v.pod).name,
                "preemptedBy": v.by,
                "domain": str(v.domain),
            }
            for v in result.preempted
        ],
        "warnings": result.warnings,  # input the simulation could not use, and what to give instead
    }
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode()


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def to_text(result: SimResult) -> str:
    out: list[str] = []
    if result.groups:
        rows = [["PODGROUP", "PHASE", "BOUND", "MESSAGE"]]
        rows += [[g.key, g.phase, f"{g.bound}/{g.pods}", g.message] for g in result.groups]
        out += [*_table(rows), ""]
    placed = [p for p in result.pods if p.node]
    pending = [p for p in result.pods if not p.node]
    if result.pods:
        rows = [["POD", "PODGROUP", "SUBGROUP", "NODE"]]
        rows += [
            [f"{p.namespace}/{p.name}", p.group or "-", p.subgroup or "-", p.node or "(pending)"] for p in result.pods
        ]
        out += [*_table(rows), ""]
    if placed:
        out += _picture(result, {p.node: p for p in placed if p.node})
    if result.preempted:
        out.append(f"Preempted ({len(result.preempted)}):")
        by: dict[tuple[str, DomainRef], list[str]] = defaultdict(list)
        for v in result.preempted:
            by[(v.by, v.domain)].append(v.pod)
        for (gang, domain), names in by.items():
            shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
            out.append(f"  {shown}: by {gang} for {domain}")
        out.append("")
    if pending:
        out.append(f"Pending ({len(pending)}):")
        by_reason: dict[str, list[str]] = defaultdict(list)
        for p in pending:
            by_reason[p.reason or "not scheduled"].append(f"{p.namespace}/{p.name}")
        for reason, names in by_reason.items():
            shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
            out.append(f"  {shown}: {reason}")
        out.append("")
    if result.warnings:
        out += [f"Warnings ({len(result.warnings)}):", *(f"  {w}" for w in result.warnings), ""]
    summary = f"{len(placed)} pod(s) placed, {len(pending)} pending, {len(result.groups)} PodGroup(s)"
    out.append(summary + (f", {len(result.warnings)} warning(s)." if result.warnings else "."))
    return "\n".join(out)


def _picture(result: SimResult, _: object) -> list[str]:
    """Where the pods landed, domain by domain, for the cluster's Topology."""
    topologies = sorted(result.state.topologies.values(), key=lambda t: t.name)
    if not topologies:
        return []
    topo: TopologySpec = topologies[0]
    labels = [lv.node_label for lv in topo.levels[:-1]]
    pods_on: dict[str, list[str]] = defaultdict(list)
    for p in result.pods:
        if p.node:
            pods_on[p.node].append(p.name)
    if not pods_on:
        return []
    nodes: list[NodeInfo] = [result.state.nodes[n] for n in pods_on if n in result.state.nodes]
    nodes.sort(key=lambda n: (tuple(n.labels.get(lb, "~") for lb in labels), n.name))
    header = " > ".join(lv.display for lv in topo.levels)
    out = [f"Where the pods landed (Topology {topo.name}: {header}):"]
    shown: list[str | None] = [None] * len(labels)
    for node in nodes:
        path = [node.labels.get(lb) for lb in labels]
        for depth, value in enumerate(path):
            if value != shown[depth] or any(shown[d] != path[d] for d in range(depth)):
                out.append(f"{'  ' * (depth + 1)}{topo.levels[depth].display} {value or '(unlabeled)'}")
                shown[depth] = value
                for deeper in range(depth + 1, len(labels)):
                    shown[deeper] = None
        out.append(f"{'  ' * (len(labels) + 1)}{node.name}: {' '.join(sorted(pods_on[node.name]))}")
    return [*out, ""]
