"""Followers not created yet: the pods a leader-first part will have once its leader is scheduled.

JobSet's exclusive placement creates a Job's leader (completion index 0) first; its pod webhook
refuses the Job's other pods until the leader has a node. A gang that waits for every pod of its
minimum before binding any would wait for ever, so once a part's leader is present the gang
counts each follower not created yet as an *expected* pod: a stand-in made from the leader (the
same template and admission, so the same requests and tolerations), keyed by the Job and index,
never a pod name the API server would accept. The plan places and holds room for them like any
member; when the follower is created it takes its stand-in's room (`slot_key` finds it).

    expected_pods(grouping, pods) -> {key: Expected}    pure; from the pods present now
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from extender.grouping.result import Grouping
from extender.model.pod import Placement, PodInfo
from extender.model.selectors import NodeSelectorTerm

# Never part of a pod name (DNS-1123: lower-case letters, digits, '-' and '.'), so a stand-in's
# key can never be a real pod's.
MARK = " (not created yet)"
NAME_FIELD = "metadata.name"


@dataclass(frozen=True)
class Expected:
    """A follower not created yet: its stand-in pod, its leaf SubGroup and its index."""

    pod: PodInfo
    leaf: str
    index: int
    leader: PodInfo  # the pod it was made from: while that stays the same object, so does the stand-in


def slot_key(namespace: str, job: str, index: int) -> str:
    """The key of the stand-in for pod INDEX of JOB (a follower's own key is never this)."""
    return f"{namespace}/{job}-{index}{MARK}"


def is_expected(key: str) -> bool:
    return key.endswith(MARK)


def job_of(pod: PodInfo) -> str:
    """The Job that owns POD (its controller), else its name."""
    controller = pod.controller
    return controller.name if controller is not None and controller.kind == "Job" else pod.name


def slot_of(pod: PodInfo, grouping: Grouping) -> str | None:
    """The stand-in POD takes the place of: a follower of a leader-first part, by its Job and index."""
    index = grouping.order.get(pod.key)
    leaf = grouping.subgroup_of.get(pod.key)
    if index is None or index == 0 or leaf is None:
        return None
    for rule in grouping.leader_first.values():
        if index < len(rule.leaves) and rule.leaves[index] == leaf:
            return slot_key(pod.namespace, job_of(pod), index)
    return None


def expected_pods(
    grouping: Grouping, pods: Sequence[PodInfo], before: Mapping[str, Expected] | None = None
) -> dict[str, Expected]:
    """For each leader-first part of GROUPING whose leader is among PODS (present: live, not held
    by a gate), a stand-in for every follower index of its minimum that no pod of PODS holds (a
    live pod, or one that succeeded). None for a part whose leader is missing: its gang is short
    of pods, as it is. BEFORE: the last answer, whose stand-ins are kept while their leader is the
    same object (the gang is built again as each follower comes: a stand-in each is O(pods) a time)."""
    if not grouping.leader_first:
        return {}
    at: dict[tuple[str, int], list[PodInfo]] = {}  # (leaf, index) -> its pods: one pass over the pods
    for p in pods:
        i, leaf = grouping.order.get(p.key), grouping.subgroup_of.get(p.key)
        if i is not None and leaf is not None:
            at.setdefault((leaf, i), []).append(p)
    out: dict[str, Expected] = {}
    for rule in grouping.leader_first.values():
        if not rule.leaves:
            continue
        live = (p for p in at.get((rule.leaves[0], 0), ()) if not p.terminal and not p.deleting and not p.held)
        leader = next(live, None)
        if leader is None:
            continue
        job = job_of(leader)
        for i in range(1, len(rule.leaves)):
            if not any(_holds(p) for p in at.get((rule.leaves[i], i), ())):
                key = slot_key(leader.namespace, job, i)
                made = before.get(key) if before else None
                if made is None or made.leader is not leader or made.leaf != rule.leaves[i]:
                    made = Expected(_stand_in(leader, key, rule.index_label, i), rule.leaves[i], i, leader)
                out[key] = made
    return out


def _holds(pod: PodInfo) -> bool:
    """Whether POD holds its index: it lives, or it succeeded (its Job does not make it again)."""
    return not pod.deleting and (not pod.terminal or pod.phase == "Succeeded")


def _stand_in(leader: PodInfo, key: str, index_label: str, index: int) -> PodInfo:
    """Follower INDEX as its controller will make it, from LEADER: the same requests, tolerations,
    node selector and node affinity (less a pin to one node by name, which gates mode adds to
    the leader), none of what only the leader carries (JobSet's pod affinity, a node, gates)."""
    labels = {**leader.labels, index_label: str(index)}
    annotations = {k: v for k, v in leader.annotations.items() if k != index_label}
    if index_label in leader.annotations:
        annotations[index_label] = str(index)
    return replace(
        leader,
        name=key.partition("/")[2],
        uid="",
        labels=labels,
        annotations=annotations,
        placement=_unpinned(leader.placement),
        node_name=None,
        nominated_node=None,
        phase="Pending",
        started=None,
        scheduled_at=None,
        scheduling_gates=(),
        deleting=False,
        claims=(),
        kube_checks=(),
    )


def _unpinned(placement: Placement) -> Placement:
    terms: list[NodeSelectorTerm] = []
    for term in placement.affinity:
        fields = tuple(r for r in term.fields if r.key != NAME_FIELD)
        if term.expressions or fields:
            terms.append(NodeSelectorTerm(term.expressions, fields))
    return replace(placement, affinity=tuple(terms))


def subgroups_with(grouping: Grouping, expected: Mapping[str, Expected]) -> tuple[dict[str, str], dict[str, int]]:
    """GROUPING's leaf SubGroup and index of each pod, the stand-ins of EXPECTED included."""
    subgroup_of = {**grouping.subgroup_of, **{k: e.leaf for k, e in expected.items()}}
    order = {**grouping.order, **{k: e.index for k, e in expected.items()}}
    return subgroup_of, order
