"""Room promised by other schedulers: pods nominated to a node that topogang did not steer there.

When kube-scheduler preempts victims for a pod it writes the node into the pod's
`status.nominatedNodeName`, and until the pod binds it counts the pod's requests against that
node for every pod of equal or lower priority (`addGENominatedPods` in its framework), so that
nobody of lower rank takes the room the victims free. topogang plans a gang the same way: the
room of such pods of at least the gang's priority is taken in the gang's snapshot (planning,
preemption, repair, `explain`). The count follows the pods (`ClusterState.nominated`): it goes
when the pod binds, is deleted or its nomination is cleared.

topogang's own nominations of planned members are reservations already (a pod with one is not
counted twice), and its steering's stale ones (a plan released) are not promises to anyone.
"""

from __future__ import annotations

from collections import Counter

from extender.core.cluster import ClusterState
from extender.core.membership import Membership


def nominated_room(state: ClusterState, membership: Membership, group: str) -> dict[str, Counter[str]]:
    """Node -> requests of the pods nominated there that GROUP's plan must leave room for."""
    if not state.nominated:  # the common case: nobody is waiting for freed room
        return {}
    view = membership.view(group)
    own = set(view.pods)
    room: dict[str, Counter[str]] = {}
    for key, node in state.nominated.items():
        pod = state.pods.get(key)
        if pod is None or key in own or key in state.reservations:
            continue
        if state.pod_priority(pod) >= view.priority:  # the rule of kube-scheduler's nominator
            room.setdefault(node, Counter()).update(pod.requests)
    return room
