"""A JobSet with JobSet's exclusive placement through the core, leaders first, against the same
JobSet without it, its pods arriving one by one.

    python bench/jobset_exclusive.py                  # 64 Jobs of 8 pods of 8 GPUs, a rack each
    python bench/jobset_exclusive.py --jobs 128 --pods 8

The cluster has a rack of 8-GPU nodes for each Job and a quarter more. Prints, in one run:
- the first leader's filter once the last leader exists (groups the JobSet, builds the gang with
  a stand-in for every follower, plans it, reserves all), and the other leaders' filters;
- the followers' phase: leaders bound, each follower created, filtered (it takes its held room)
  and bound, per follower;
- for comparison, the same JobSet without exclusive placement, every pod created one by one and
  filtered as it comes (what any gang pays while its pods arrive), per pod.
Both are O(pods) a pod that arrives: the gang is grouped and built again with each new member.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from extender.core.cluster import ClusterState, object_key
from extender.core.decisions import BIND
from extender.core.scheduler import GangScheduler
from extender.grouping import synthesize
from extender.model.node import HOSTNAME_LABEL, NodeInfo
from extender.model.pod import PodInfo, parse_pod
from extender.model.topology import parse_topology

RACK = "example.com/rack"
LEVELS = [{"nodeLabel": "example.com/block"}, {"nodeLabel": RACK}]
TOPOLOGY = parse_topology({"metadata": {"name": "default"}, "spec": {"levels": LEVELS}})
GPUS = {"requests": {"nvidia.com/gpu": "8", "cpu": "1"}, "limits": {"nvidia.com/gpu": "8"}}


def jobset(jobs: int, pods: int, exclusive: bool) -> dict[str, Any]:
    annotations = {"kai.scheduler/topology": "default"}
    if exclusive:
        annotations["alpha.jobset.sigs.k8s.io/exclusive-topology"] = RACK
    template = {"spec": {"containers": [{"name": "main", "image": "x", "resources": GPUS}]}}
    job = {"parallelism": pods, "completions": pods, "completionMode": "Indexed", "template": template}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "ml", "uid": "js-uid", "annotations": annotations},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": jobs, "template": {"spec": job}}]},
    }


def cluster(jobs: int, pods: int, workload: dict[str, Any]) -> tuple[GangScheduler, list[str], dict[str, Any]]:
    state = ClusterState()
    names = []
    for r in range(jobs + jobs // 4):
        for i in range(pods):
            name = f"b{r // 32}-r{r}-n{i}"
            labels = {HOSTNAME_LABEL: name, "example.com/block": f"b{r // 32}", RACK: f"b{r // 32}-r{r}"}
            alloc = {"nvidia.com/gpu": 8000, "cpu": 64000, "memory": 512 * 2**30 * 1000, "pods": 110_000}
            state.upsert_node(NodeInfo(name, labels, alloc, (), True, False))
            names.append(name)
    state.set_topology("default", TOPOLOGY)
    made = synthesize(workload, "ml")
    for body in (workload, *made.owners):
        meta = body["metadata"]
        state.set_object(object_key(body["apiVersion"], body["kind"], meta["namespace"], meta["name"]), body)
    return GangScheduler(state), names, {p["metadata"]["name"]: p for p in made.pods}


def admitted(body: dict[str, Any], rack: str | None) -> PodInfo:
    """The pod as JobSet's webhook admits it: a leader with its pod affinity, a follower with a
    nodeSelector to its leader's rack."""
    body = copy.deepcopy(body)
    if rack is None:
        term = {"labelSelector": {}, "topologyKey": RACK}
        body["spec"]["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    else:
        body["spec"]["nodeSelector"] = {RACK: rack}
    return parse_pod(body)


def bound(pod: PodInfo, node: str) -> PodInfo:
    return replace(pod, node_name=node, phase="Running")


def leaders_first(jobs: int, pods: int) -> None:
    scheduler, names, bodies = cluster(jobs, pods, jobset(jobs, pods, exclusive=True))
    leaders = [admitted(bodies[f"js-workers-{j}-0"], None) for j in range(jobs)]
    for p in leaders:
        scheduler.observe_pod(p)
    start = time.perf_counter()
    first = scheduler.filter(leaders[0], names, 0.0)
    planned = time.perf_counter() - start
    assert first.nodes, first.reason
    assert first.event is not None
    start = time.perf_counter()
    node_of = {leaders[0].key: first.nodes[0]} | {p.key: scheduler.filter(p, names, 0.0).nodes[0] for p in leaders[1:]}
    others = time.perf_counter() - start
    print(
        f"leaders first: {jobs} Jobs x {pods} pods on {len(names)} nodes: the first leader's filter (the whole"
        f" JobSet, {first.event.expected} stand-ins) {planned * 1000:.0f} ms; {jobs - 1} more leaders"
        f" {others * 1000:.0f} ms"
    )
    for p in leaders:
        scheduler.bind(p.key, node_of[p.key], 1.0)
        scheduler.observe_pod(bound(p, node_of[p.key]))
    start = time.perf_counter()
    for j in range(jobs):
        rack = scheduler.state.nodes[node_of[leaders[j].key]].labels[RACK]
        for i in range(1, pods):
            p = admitted(bodies[f"js-workers-{j}-{i}"], rack)
            scheduler.observe_pod(p)
            result = scheduler.filter(p, names, 2.0)
            assert result.nodes, result.reason
            assert scheduler.bind(p.key, result.nodes[0], 2.0).action == BIND
            scheduler.observe_pod(bound(p, result.nodes[0]))
    followers = jobs * (pods - 1)
    assert not scheduler.state.reservations
    per = (time.perf_counter() - start) * 1000 / followers
    print(f"  followers: {followers}, each created, filtered into its held room and bound: {per:.1f} ms each")


def one_by_one(jobs: int, pods: int) -> None:
    scheduler, names, bodies = cluster(jobs, pods, jobset(jobs, pods, exclusive=False))
    start = time.perf_counter()
    for body in bodies.values():
        p = parse_pod(body)
        scheduler.observe_pod(p)
        scheduler.filter(p, names, 0.0)
    per = (time.perf_counter() - start) * 1000 / len(bodies)
    print(f"without exclusive placement: {len(bodies)} pods, each created and filtered as it comes: {per:.1f} ms each")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=64)
    parser.add_argument("--pods", type=int, default=8)
    args = parser.parse_args()
    leaders_first(args.jobs, args.pods)
    one_by_one(args.jobs, args.pods)


if __name__ == "__main__":
    main()
