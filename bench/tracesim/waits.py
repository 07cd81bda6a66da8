"""The maximum-wait sweep of bench/trace.py: one policy per maximum (`--max-wait off,4h,...`), the
table of what each promised and cost, the targets at the shortest maximum, and the picture.

A maximum is `Settings.max_wait` of topogang+reserve (the server's `--max-wait`); "off" is
topogang+reserve itself. The bound checked at every setting: each gang's wait is at most the
maximum plus its overdue drain (bench/tracesim/replay.py). The targets at the shortest maximum
(the owner's, set before measuring): large gangs' p99 wait <= 0.5 x bestfit's, allocation >=
bestfit's - 1 point, medium p99 <= 1.25 x and small p99 <= 1.5 x bestfit's; what gangs of the
highest priority pay is their p99 against the maximum off.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bench.tracesim import compare
from bench.tracesim.metrics import SIZES
from extender.model.runtime_bound import parse_duration

OFF = "off"
RESERVE = "topogang+reserve"


def maxima(text: str) -> list[tuple[str, float | None]]:
    """ "off,4h,30m" -> [("off", None), ("4h", 14400.0), ("30m", 1800.0)]."""
    out: list[tuple[str, float | None]] = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        seconds = None if item == OFF else parse_duration(item)
        if item != OFF and (seconds is None or seconds <= 0):
            raise argparse.ArgumentTypeError(f"{item!r}: expected off or a duration such as 30m, 2h, 5400")
        out.append((item, seconds))
    return out


def policy_name(label: str) -> str:
    return RESERVE if label == OFF else f"topogang+wait{label}"


def describe(rows: list[dict[str, Any]], sweep: list[tuple[str, float | None]], base: str = "bestfit") -> str:
    """The sweep's table and the targets, from the combined rows of one load and bounded share."""
    by = {r["policy"]: r for r in rows}
    lines = [
        "\nmaximum wait sweep (waits in s; over bound: the largest wait - (maximum + overdue drain), <= 0 met;"
        " estimate error: |estimated - actual start| / actual wait, median/p90):",
        f"{'max wait':>9} {'alloc':>6} {'S p99':>6} {'M p99':>7} {'L p99':>7} {'top p99':>8} {'top max':>8}"
        f" {'overdue':>8} {'over bound':>10} {'>bound':>6}  estimate error S / M / L",
    ]
    for label, _ in sweep:
        r = by.get(policy_name(label))
        if r is None:
            continue
        errors = " / ".join(f"{r[f'estimate_err_p50_{s}']:.2f}-{r[f'estimate_err_p90_{s}']:.2f}" for s in SIZES)
        bound = f"{r['over_bound_max_s']:>10.0f} {r['over_bound_jobs']:>6d}" if "over_bound_max_s" in r else " " * 17
        overdue = f"{r['overdue_jobs']:>8d}" if "overdue_jobs" in r else " " * 8
        lines.append(
            f"{label:>9} {r['allocation']:>6.1%} {r['wait_p99_small_s']:>6.0f} {r['wait_p99_medium_s']:>7.0f}"
            f" {r['wait_p99_large_s']:>7.0f} {r['wait_p99_top_s']:>8.0f} {r['wait_max_top_s']:>8.0f}"
            f" {overdue} {bound}  {errors}"
        )
    if base in by:
        b = by[base]
        lines.append(
            f"{base:>9} {b['allocation']:>6.1%} {b['wait_p99_small_s']:>6.0f} {b['wait_p99_medium_s']:>7.0f}"
            f" {b['wait_p99_large_s']:>7.0f} {b['wait_p99_top_s']:>8.0f} {b['wait_max_top_s']:>8.0f}"
        )
    shortest = min((s for _, s in sweep if s is not None), default=None)
    label = next((lb for lb, s in sweep if s == shortest), None)
    if label is None or base not in by or policy_name(label) not in by:
        return "\n".join(lines)
    mine, theirs = by[policy_name(label)], by[base]
    lines.append(f"targets with the maximum at {label} (against {base}, paired per trace):")
    for what, key, factor in (
        ("large p99", "wait_p99_large_s", 0.5),
        ("medium p99", "wait_p99_medium_s", 1.25),
        ("small p99", "wait_p99_small_s", 1.5),
    ):
        bound = factor * theirs[key]
        ok = round(mine[key]) <= round(bound)
        lines.append(
            f"  {what} {mine[key]:.0f} s <= {factor:g} x {theirs[key]:.0f} = {bound:.0f} s:"
            f" {'met' if ok else 'MISSED'}{compare.against(mine, theirs, key)}"
        )
    ok = mine["allocation"] >= theirs["allocation"] - 0.01
    lines.append(
        f"  allocation {mine['allocation']:.1%} >= {theirs['allocation']:.1%} - 1 point: {'met' if ok else 'MISSED'}"
        + compare.against(mine, theirs, "allocation", 100.0, "pt")
    )
    if RESERVE in by:
        off = by[RESERVE]
        lines.append(
            f"  highest priority's p99 {mine['wait_p99_top_s']:.0f} s against {off['wait_p99_top_s']:.0f} s with no"
            f" maximum{compare.against(mine, off, 'wait_p99_top_s')}"
        )
    for lb, s in sweep:
        r = by.get(policy_name(lb))
        if r is not None and s is not None:
            ok = r["over_bound_max_s"] <= 0.5
            lines.append(
                f"  {lb}: every wait <= maximum + overdue drain: {'met' if ok else 'MISSED'}"
                f" ({r['over_bound_jobs']} of {r['overdue_jobs']} overdue gangs beyond it, at most by"
                f" {max(r['over_bound_max_s'], 0):.0f} s; the wait for a slot explains"
                f" {r['over_bound_slot_share']:.0%} of them; overdue to holding room p99 {r['slot_wait_p99_s']:.0f} s)"
            )
    return "\n".join(lines)


def draw(rows: list[dict[str, Any]], sweep: list[tuple[str, float | None]], out: Path) -> list[Path]:
    """p99 wait per size class, and allocation, against the maximum wait (off at the left)."""
    by = {r["policy"]: r for r in rows}
    points = [(label, by[policy_name(label)]) for label, _ in sweep if policy_name(label) in by]
    if len(points) < 2:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    labels = [lb for lb, _ in points]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for size in (*SIZES, "top"):
        key = "wait_p99_top_s" if size == "top" else f"wait_p99_{size}_s"
        name = "highest priority" if size == "top" else size
        left.plot(labels, [max(r[key], 1.0) for _, r in points], marker="o", lw=1, label=name)
        if "bestfit" in by and size != "top":
            left.axhline(max(by["bestfit"][key], 1.0), lw=0.6, ls="--", color=left.lines[-1].get_color())
    left.set(xlabel="maximum wait", yscale="log", title="wait p99 (s); dashed: bestfit")
    left.legend(fontsize=7)
    right.plot(labels, [r["allocation"] for _, r in points], marker="o", lw=1, label="topogang")
    if "bestfit" in by:
        right.axhline(by["bestfit"]["allocation"], lw=0.8, ls="--", color="0.5", label="bestfit")
    right.set(xlabel="maximum wait", ylabel="GPUs allocated (mean)", title="allocation")
    right.legend(fontsize=7)
    fig.tight_layout()
    path = out / "trace-max-wait.png"
    fig.savefig(path, dpi=72)
    plt.close(fig)
    return [path]
