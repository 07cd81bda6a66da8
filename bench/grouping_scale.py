"""Grouping time of one Job cut into N segment SubGroups (segment-size 1), N doubling.

    python bench/grouping_scale.py                 # N = 2,500 .. 19,999 (segments; the limit is 20,000 SubGroups)
    python bench/grouping_scale.py --sizes 1000 2000

Prints, for each N, the median of `group_pods` (one pod; the tree comes from the Job's spec) and
of `build_gang` on the grouped PodGroup, and the ratio to the previous N: about 2 when the work
is linear in the number of SubGroups, about 4 when it is quadratic.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from extender.grouping import ObjectIndex, group_pods
from extender.model.limits import MAX_SUBGROUPS
from extender.model.pod import PodInfo, parse_pod
from extender.model.podgroup import PodGroupSpec
from extender.model.topology import parse_topology
from extender.placement import build_gang

SEGMENTS = {"kai.scheduler/segment-size": "1", "kai.scheduler/segment-topology-required-placement": "example.com/rack"}


LEVELS = [{"nodeLabel": "example.com/rack"}, {"nodeLabel": "kubernetes.io/hostname"}]
TOPOLOGIES = {"default": parse_topology({"metadata": {"name": "default"}, "spec": {"levels": LEVELS}})}


def _job(n: int) -> dict[str, object]:
    template = {"metadata": {"annotations": SEGMENTS}, "spec": {"containers": [{"name": "c"}]}}
    spec = {"parallelism": n, "completionMode": "Indexed", "template": template}
    meta = {"name": "batch", "namespace": "ml", "uid": "u", "annotations": {"kai.scheduler/topology": "default"}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def _pod() -> PodInfo:
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "batch", "uid": "u", "controller": True}
    labels = {"batch.kubernetes.io/job-completion-index": "0"}
    meta = {"name": "batch-0", "namespace": "ml", "labels": labels, "ownerReferences": [owner]}
    return parse_pod({"metadata": meta, "spec": {"containers": [{"name": "c"}]}})


def _median_ms(run: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2500, 5000, 10000, MAX_SUBGROUPS - 1])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    pod, previous = _pod(), None
    print(f"{'subgroups':>10} {'group_ms':>10} {'ratio':>6} {'build_ms':>10} {'ratio':>6}")
    for n in args.sizes:
        index = ObjectIndex([_job(n)])
        grouped = group_pods([pod], index, {})
        (g,) = grouped.groups.values()
        pg = g.podgroup
        assert isinstance(pg, PodGroupSpec), g.errors
        built = build_gang(pg, [pod], TOPOLOGIES, subgroup_of=g.subgroup_of)
        assert built.gang is not None, built.errors
        group_ms = _median_ms(partial(group_pods, [pod], index, {}), args.repeat)
        build_ms = _median_ms(partial(build_gang, pg, [pod], TOPOLOGIES, subgroup_of=g.subgroup_of), args.repeat)
        ratios = ("", "") if previous is None else (f"{group_ms / previous[0]:.2f}", f"{build_ms / previous[1]:.2f}")
        print(f"{len(pg.subgroups):>10} {group_ms:>10.1f} {ratios[0]:>6} {build_ms:>10.1f} {ratios[1]:>6}")
        previous = (group_ms, build_ms)


if __name__ == "__main__":
    main()
