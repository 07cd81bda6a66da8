"""Paired differences per trace: is a policy better than another, or is the gap noise?

The figures move more from trace to trace than between policies (a trace of 3,000 jobs holds
about 26 large gangs, so its p99 is nearly its maximum), but every policy replays the same
traces, so the difference *on each trace* is what to compare: its mean over the traces, a 95%
interval for that mean (Student's t over the per-trace differences), and on how many traces the
policy did better. An interval that includes 0 is noise at this number of traces.
"""

from __future__ import annotations

import math
from typing import Any

# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom (then the normal's 1.96).
_T95 = (12.71, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131)
_T95 += (2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)

# (figure, label, higher is better, scale for printing, unit)
FIGURES = (
    ("allocation", "alloc", True, 100.0, "pt"),
    ("racks_at_lower_bound", "racks@LB", True, 100.0, "pt"),
    ("wait_p99_small_s", "S p99", False, 1.0, "s"),
    ("wait_p99_medium_s", "M p99", False, 1.0, "s"),
    ("wait_p99_large_s", "L p99", False, 1.0, "s"),
)


def t95(df: int) -> float:
    return _T95[df - 1] if 1 <= df <= len(_T95) else 1.96


def interval(diffs: list[float]) -> tuple[float, float]:
    """Mean of DIFFS and the half-width of its 95% interval (inf with one trace)."""
    n = len(diffs)
    mean = sum(diffs) / n
    if n < 2:
        return mean, math.inf
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    return mean, t95(n - 1) * sd / math.sqrt(n)


def paired(rows: list[dict[str, Any]], base: str) -> dict[str, dict[str, tuple[float, float, int, int]]]:
    """Per policy other than BASE, per figure: (mean difference, 95% half-width, traces where the
    policy did better, traces), from the `<figure>_per_trace` lists of combined rows."""
    by = {r["policy"]: r for r in rows}
    if base not in by:
        return {}
    out: dict[str, dict[str, tuple[float, float, int, int]]] = {}
    for r in rows:
        if r["policy"] == base:
            continue
        figs: dict[str, tuple[float, float, int, int]] = {}
        for key, _, higher, _, _ in FIGURES:
            mine, theirs = r.get(f"{key}_per_trace"), by[base].get(f"{key}_per_trace")
            if not mine or not theirs:
                continue
            diffs = [float(a) - float(b) for a, b in zip(mine, theirs, strict=True)]
            better = sum(1 for d in diffs if (d > 0 if higher else d < 0))
            figs[key] = (*interval(diffs), better, len(diffs))
        out[r["policy"]] = figs
    return out


def describe(rows: list[dict[str, Any]], base: str, only: frozenset[str] | None = None) -> str:
    """The paired differences as text: one line per policy (those of ONLY, when given)."""
    table = {p: f for p, f in paired(rows, base).items() if only is None or p in only}
    if not table or rows[0].get("traces", 1) < 2:
        return ""
    lines = [f"paired against {base}, per trace (mean difference ± 95% interval; better on k of n traces):"]
    for policy, figs in table.items():
        cells = []
        for key, label, _, scale, unit in FIGURES:
            if key not in figs:
                continue
            mean, half, better, n = figs[key]
            noise = "" if abs(mean) > half else " ~"
            digits = 1 if unit == "pt" else 0
            cells.append(f"{label} {mean * scale:+.{digits}f}±{half * scale:.{digits}f}{unit} ({better}/{n}){noise}")
        lines.append(f"  {policy:<18} " + "  ".join(cells))
    lines.append("  (~: the interval includes 0, noise at this many traces)")
    return "\n".join(lines)


def against(mine: dict[str, Any], base: dict[str, Any], key: str, scale: float = 1.0, unit: str = "s") -> str:
    """MINE's figure KEY against BASE's trace by trace, for a target's line: " [paired: mean ±
    95% interval UNIT, noise or beyond noise]" ("" with fewer than two traces)."""
    a, b = mine.get(f"{key}_per_trace"), base.get(f"{key}_per_trace")
    if not a or not b or len(a) < 2:
        return ""
    mean, half = interval([x - y for x, y in zip(a, b, strict=True)])
    digits = 1 if unit == "pt" else 0
    noise = "noise" if abs(mean) <= half else "beyond noise"
    return f" [paired: {mean * scale:+.{digits}f} ± {half * scale:.{digits}f} {unit}, {noise}]"
