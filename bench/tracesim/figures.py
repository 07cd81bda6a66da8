"""PNG pictures (matplotlib, the `bench` extra). Of one trace: allocation over time, the wait-time
CDF, racks per gang against the lower bound, and the racks' use at the busiest moment (the most
gangs waiting). Of a load sweep (`draw_loads`): wait p99 per size class, and allocation, against load."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.tracesim.cluster import Cluster
from bench.tracesim.metrics import SIZES, lower_bound, size_class
from bench.tracesim.replay import Replay
from bench.tracesim.workload import Job, window


def draw(cluster: Cluster, jobs: list[Job], runs: Sequence[Replay], out: Path, prefix: str = "trace") -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fn in (
        ("allocation", _allocation),
        ("wait-cdf", _waits),
        ("racks", _racks),
        ("heatmap", _heatmap),
    ):
        fig = fn(plt, cluster, jobs, runs)
        path = out / f"{prefix}-{name}.png"
        fig.savefig(path, dpi=72)
        plt.close(fig)
        paths.append(path)
    return paths


def _allocation(plt: Any, cluster: Cluster, jobs: list[Job], runs: Sequence[Replay]) -> Any:
    fig, ax = plt.subplots(figsize=(9, 3.6))
    t0, t1 = window(jobs, 0.1)
    for run in runs:
        hours = np.array(run.times) / 3600
        ax.step(hours, np.array(run.used) / cluster.capacity, where="post", lw=0.8, label=run.policy)
    ax.axvspan(t0 / 3600, t1 / 3600, color="0.92", zorder=0, label="measured window")
    ax.set(xlabel="hours", ylabel="GPUs allocated", ylim=(0, 1.02), title="Allocation over time")
    ax.legend(fontsize=7, ncol=3, loc="lower center")
    fig.tight_layout()
    return fig


def _waits(plt: Any, cluster: Cluster, jobs: list[Job], runs: Sequence[Replay]) -> Any:
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
    for ax, small in zip(axes, (True, False), strict=True):
        for run in runs:
            chosen = [p for p in run.placed.values() if (size_class(cluster, p.job) == "small") == small]
            w = np.sort([p.start - p.job.arrival for p in chosen])
            w = np.maximum(w, 1.0)  # a log axis: "at once" shows as 1 s
            ax.step(w, np.arange(1, len(w) + 1) / max(len(w), 1), where="post", lw=0.9, label=run.policy)
        ax.set(xscale="log", xlabel="wait (s)", title="small gangs (one rack)" if small else "larger gangs")
    axes[0].set_ylabel("share of gangs started")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def _racks(plt: Any, cluster: Cluster, jobs: list[Job], runs: Sequence[Replay]) -> Any:
    fig, ax = plt.subplots(figsize=(9, 3.2))
    edges = np.arange(0, 6)
    width = 0.8 / len(runs)
    for i, run in enumerate(runs):
        extra = [
            len(set(cluster.rack_of[list(p.nodes)].tolist())) - lower_bound(cluster, p.job.demand)
            for p in run.placed.values()
        ]
        counts = np.bincount(np.clip(extra, 0, edges[-1]), minlength=len(edges)) / max(len(extra), 1)
        ax.bar(edges + i * width, counts, width, label=run.policy)
    ax.set_xticks(edges + 0.4 - width / 2, [*(f"+{e}" for e in edges[:-1]), f"+{edges[-1]} or more"])
    ax.set(xlabel="racks used beyond the lower bound", ylabel="share of gangs", title="Racks per gang")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _heatmap(plt: Any, cluster: Cluster, jobs: list[Job], runs: Sequence[Replay]) -> Any:
    s = cluster.shape
    width = int((cluster.rack_end - cluster.rack_start).max())
    fig, axes = plt.subplots(2, len(runs), figsize=(2.2 * len(runs), 6.4), squeeze=False)
    for col, run in enumerate(runs):
        for row, (what, moment) in enumerate((("busiest", run.busiest), ("worst", run.worst))):
            ax = axes[row][col]
            ax.set(xticks=[], yticks=[])
            if moment is None:
                continue
            when, queued, used = moment
            grid = np.full((cluster.racks, width), np.nan)
            for r in range(cluster.racks):
                lo, hi = int(cluster.rack_start[r]), int(cluster.rack_end[r])
                cap = np.where(cluster.gpus[lo:hi] > 0, cluster.gpus[lo:hi], np.nan)
                grid[r, : hi - lo] = used[lo:hi] / cap
            ax.imshow(grid, aspect="auto", cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
            for b in range(1, s.zones * s.blocks):
                ax.axhline(b * s.racks - 0.5, color="white", lw=0.6 if b % s.blocks else 1.6)
            share = int(used.sum()) / cluster.capacity
            ax.set_title(f"{run.policy}, {what}\n{share:.0%} used, {queued} waiting, {when / 3600:.0f} h", fontsize=8)
    axes[0][0].set_ylabel("busiest: most gangs waiting\nrows: racks; columns: nodes", fontsize=8)
    axes[1][0].set_ylabel("worst: most GPUs free\nwhile gangs wait", fontsize=8)
    fig.tight_layout()
    return fig


def draw_loads(rows: Sequence[dict[str, Any]], out: Path, prefix: str = "trace") -> list[Path]:
    """ROWS: one per policy and load (the first bounded share of each); none when fewer than two loads."""
    loads = sorted({r["load"] for r in rows if r["load"] == r["load"]})
    if len(loads) < 2:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    share = rows[0]["bounded"]
    chosen = [r for r in rows if r["bounded"] == share]
    names = list(dict.fromkeys(r["policy"] for r in chosen))
    out.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, len(SIZES), figsize=(11, 3.4))
    for ax, size in zip(axes, SIZES, strict=True):
        for name in names:
            mine = sorted((r["load"], r[f"wait_p99_{size}_s"]) for r in chosen if r["policy"] == name)
            ax.plot([x for x, _ in mine], [max(y, 1.0) for _, y in mine], marker="o", lw=1, label=name)
        ax.set(xlabel="offered load", yscale="log", title=f"{size} gangs: wait p99 (s)")
    axes[-1].legend(fontsize=7)
    fig.tight_layout()
    waits = out / f"{prefix}-wait-p99-by-load.png"
    fig.savefig(waits, dpi=72)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name in names:
        mine = sorted((r["load"], r["allocation"]) for r in chosen if r["policy"] == name)
        ax.plot([x for x, _ in mine], [y for _, y in mine], marker="o", lw=1, label=name)
    ax.plot(loads, loads, color="0.6", lw=0.8, ls="--", label="offered")
    ax.set(xlabel="offered load", ylabel="GPUs allocated (mean)", title="Allocation against load")
    ax.legend(fontsize=7)
    fig.tight_layout()
    alloc = out / f"{prefix}-allocation-by-load.png"
    fig.savefig(alloc, dpi=72)
    plt.close(fig)
    return [waits, alloc]
