"""The simulation's results as JSON (for programs) or text (a table and a picture of the racks)."""

from __future__ import annotations

from collections import defaultdict

import orjson

from extender.core.decisions import INVALID
from extender.model.keys import GroupKey
from extender.model.node import NodeInfo
from extender.model.topology import TopologySpec
from extender.placement import DomainRef
from extender.simulate.runner import SimResult

SHOWN_RUNNING = 4  # running pods named on one node before "and N more"


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
                "movedTo": v.moved_to or None,
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
        # bound against the minimum the gang needs (an Invalid gang has none to show)
        rows = [["PODGROUP", "PHASE", "BOUND/MIN", "MESSAGE"]]
        rows += [
            [g.key, g.phase, "-" if g.phase == INVALID else f"{g.bound}/{g.minimum}", g.message] for g in result.groups
        ]
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
        out += _picture(result)
    moved = [v for v in result.preempted if v.moved_to]
    if moved:
        out.append(f"Moved ({len(moved)}):")
        out += [f"  {v.pod} to {v.moved_to}: for {v.by} in {v.domain}" for v in moved]
        out.append("")
    preempted = [v for v in result.preempted if not v.moved_to]
    if preempted:
        out.append(f"Preempted ({len(preempted)}):")
        by: dict[tuple[str, DomainRef], list[str]] = defaultdict(list)
        for v in preempted:
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


def _picture(result: SimResult) -> list[str]:
    """Where the pods landed, domain by domain, for the cluster's Topology. The domains of its
    finest level that took a pod (the racks) are shown whole enough to read why: each node there
    with a pod already running or that is cordoned is drawn too, with those pods."""
    topologies = sorted(result.state.topologies.values(), key=lambda t: t.name)
    if not topologies:
        return []
    topo: TopologySpec = topologies[0]
    labels = [lv.node_label for lv in topo.levels[:-1]]
    nodes_by_name = result.state.nodes
    placed: dict[str, list[str]] = defaultdict(list)
    for p in result.pods:
        if p.node:
            placed[p.node].append(p.name)
    if not placed:
        return []

    def path(node: NodeInfo) -> tuple[str | None, ...]:
        return tuple(node.labels.get(lb) for lb in labels)

    near = {path(nodes_by_name[n]) for n in placed if n in nodes_by_name}
    new = {f"{p.namespace}/{p.name}" for p in result.pods}
    running: dict[str, list[str]] = defaultdict(list)
    for pod in result.state.pods.values():
        if pod.node_name is not None and pod.key not in new:
            running[pod.node_name].append(pod.key)
    shown = [
        n
        for n in nodes_by_name.values()
        if n.name in placed or (path(n) in near and (n.name in running or not n.schedulable))
    ]
    shown.sort(key=lambda n: (tuple(v or "~" for v in path(n)), n.name))
    header = " > ".join(lv.display for lv in topo.levels)
    where = f"each {topo.levels[len(labels) - 1].display}'s" if labels else "the"
    out = [f"Where the pods landed (Topology {topo.name}: {header}), with {where} running pods and cordoned nodes:"]
    drawn: list[str | None] = [None] * len(labels)
    for node in shown:
        node_path = path(node)
        for depth, value in enumerate(node_path):
            if value != drawn[depth] or any(drawn[d] != node_path[d] for d in range(depth)):
                out.append(f"{'  ' * (depth + 1)}{topo.levels[depth].display} {value or '(unlabeled)'}")
                drawn[depth] = value
                for deeper in range(depth + 1, len(labels)):
                    drawn[deeper] = None
        out.append(f"{'  ' * (len(labels) + 1)}{node.name}: {_on_node(node, placed[node.name], running[node.name])}")
    return [*out, ""]


def _on_node(node: NodeInfo, placed: list[str], running: list[str]) -> str:
    """The pods placed on NODE, then what was running there and whether it takes pods."""
    parts = sorted(placed)
    if running:
        names = sorted(running)
        more = f" and {len(names) - SHOWN_RUNNING} more" if len(names) > SHOWN_RUNNING else ""
        parts.append(f"(running: {', '.join(names[:SHOWN_RUNNING])}{more})")
    if node.unschedulable:
        parts.append("(cordoned)")
    elif not node.ready:
        parts.append("(not ready)")
    return " ".join(parts)
