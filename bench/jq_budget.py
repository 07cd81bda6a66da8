"""What the jq budget costs on normal expressions: a ResourceInterface grouping with and without it.

ResourceInterface expressions run in a worker process with a time and memory budget
(extender/grouping/jq_budget.py). This measures `group_with` (every expression of one
ResourceInterface on one workload object) and single expressions, three ways, side by side:

    in-process          jq.compile + run in the server's process for every expression: no budget
                        (how topogang evaluated before the budget)
    in-process, cached  the same, with the worker's cache of compiled programs: no budget, so
                        budgeted / this is the cost of the budget itself (the pipe round trip)
    budgeted            the worker process (what topogang does)

    python bench/jq_budget.py [--repeat 200]

Cases: the seed's RayCluster ResourceInterface (examples/workloads/raycluster-resourceinterface.yaml)
on a RayCluster of 2 and of 16 worker groups, and one simple path expression.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jq
import orjson
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from extender.grouping.grouper import Link
from extender.grouping.jq_budget import RUNNER, Budget, JqRunner
from extender.grouping.resource_interface import group_with, index_resource_interfaces
from extender.model.pod import OwnerRef

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "workloads" / "raycluster-resourceinterface.yaml"


class InProcess(JqRunner):
    """No budget: jq in this process, compiled for every expression (or once, when cached)."""

    def __init__(self, cached: bool) -> None:
        super().__init__()
        self.cached = cached
        self.programs: dict[tuple[str, str], Any] = {}
        self.roots: dict[bytes, Any] = {}

    def evaluate(self, program: str, args: dict[str, Any], root: bytes, budget: Budget) -> list[Any]:
        value = self.roots.get(root)
        if value is None:
            value = self.roots[root] = orjson.loads(root)
        if not self.cached:
            return list(jq.compile(program, args=args).input_value(value).all())
        key = (program, orjson.dumps(args).decode())
        compiled = self.programs.get(key)
        if compiled is None:
            compiled = self.programs[key] = jq.compile(program, args=args)
        return list(compiled.input_value(value).all())


def cluster(groups: int) -> dict[str, Any]:
    _, base = yaml.safe_load_all(EXAMPLE.read_text())
    out = copy.deepcopy(base)
    template = out["spec"]["workerGroupSpecs"][0]
    out["spec"]["workerGroupSpecs"] = [{**template, "groupName": f"g{i}"} for i in range(groups)]
    return dict(out)


def timed(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm: the worker started, caches filled
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    ri_body, _ = yaml.safe_load_all(EXAMPLE.read_text())
    (ri,) = index_resource_interfaces([ri_body])[0].values()
    runners = {"in-process": InProcess(cached=False), "in-process, cached": InProcess(cached=True), "budgeted": RUNNER}

    cases: dict[str, Callable[[JqRunner], object]] = {}
    for groups in (2, 16):
        body = cluster(groups)
        link = Link(OwnerRef("ray.io/v1", "RayCluster", "demo", "uid", True), "default", body)
        cases[f"group_with, {groups} worker groups"] = lambda r, link=link: group_with(ri, link, r)
    root = orjson.dumps(cluster(2))
    cases["one expression .spec.workerGroupSpecs[0].replicas"] = lambda r: r.evaluate(
        ".spec.workerGroupSpecs[0].replicas", {}, root, Budget(1e9)
    )

    print(f"median ms over {args.repeat} runs; ratios against in-process (lower is faster)")
    columns = ("in-process", "in-proc cached", "budgeted", "budgeted/in-process", "budgeted/cached")
    print(f"{'case':<52} " + "  ".join(f"{c:>{len(c)}}" for c in columns))
    for name, case in cases.items():
        ms = {label: timed(lambda r=runner, c=case: c(r), args.repeat) for label, runner in runners.items()}
        plain, cached, budget = ms["in-process"], ms["in-process, cached"], ms["budgeted"]
        cells = (plain, cached, budget, budget / plain, budget / cached)
        print(f"{name:<52} " + "  ".join(f"{v:>{len(c)}.3f}" for v, c in zip(cells, columns, strict=True)))
    RUNNER.close()


if __name__ == "__main__":
    main()
