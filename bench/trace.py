"""Cluster-level quality on a trace: topogang against the policies users would pick instead.

Seeded traces of GPU jobs calibrated to public GPU-cluster traces (bench/tracesim/workload.py;
four of 3,000 jobs by default, or your own: --trace FILE.csv) are replayed at each offered load
on a cluster shape, once per policy, the same jobs in the same queue order (kube-scheduler's),
and the figures (means over the traces) are printed side by side, one table per load:

    .venv/bin/python bench/trace.py                          # loads 0.6..0.95 on 512 nodes, pictures
    .venv/bin/python bench/trace.py --loads 0.85 --shape nvl72
    .venv/bin/python bench/trace.py --json                   # one object per policy and load
    .venv/bin/python bench/trace.py --bounded 0,0.5,1        # sweep the share of jobs with a bound
    .venv/bin/python bench/trace.py --elastic 0              # no elastic jobs (20% of multi-pod jobs by default)
    .venv/bin/python bench/trace.py --services 0             # no long-running services (10% of GPU demand by default)
    .venv/bin/python bench/trace.py --loads 0.85 --seeds 16 --policies topogang,topogang+defrag,bestfit  # moves
    .venv/bin/python bench/trace.py --trace my.csv --policies topogang,bestfit
    .venv/bin/python bench/trace.py --public trace_kalos.csv  # AcmeTrace or Helios, mapped (tracesim/public.py)
    .venv/bin/python bench/trace.py --write-trace t.csv      # the first generated trace, to edit
    .venv/bin/python bench/trace.py --relax                  # the same jobs without constraints
    .venv/bin/python bench/trace.py --one-priority           # the same jobs, all of one priority
    .venv/bin/python bench/trace.py --loads 0.85 --seeds 16 --policies topogang,bestfit   # paired, 16 traces
    .venv/bin/python bench/trace.py --variant 'large:coarsest_only=1'   # one more policy: topogang+large
    .venv/bin/python bench/trace.py --loads 0.85 --max-wait off,4h,2h,1h,30m --policies bestfit   # the sweep

Policies (bench/tracesim/policies.py): topogang (extender.placement.plan, the server's call),
topogang+reserve (the same with extender.core.reservations: --reserve-after, --reservations),
topogang-loose (its default compactness off), topogang-whole (elastic gangs' optional pods
placed with their minimum, never given back: minimums first off), topogang+defrag (movable pods moved
out of a waiting gang's way by the server's move search, at most --moves-per-hour, none twice within
--move-cooldown; --movable-elastic: elastic jobs' optional pods move too), bestfit (Kueue TAS BestFit), fullest
(KAI-Scheduler's binpack), first-fit (topology-blind), and topogang+NAME for each --variant
(reservation Settings fields changed), and topogang+wait<MAX> for each --max-wait (a maximum wait:
bench/tracesim/waits.py prints what each promised and cost). Under each table the policies are compared with --paired
(bestfit) trace by trace: the mean difference, its 95% interval and on how many traces each did
better (bench/tracesim/compare.py); the targets carry the same interval. Shapes (bench/tracesim/cluster.py): 512,
4096, nvl72. Figures are defined in bench/tracesim/metrics.py. The targets printed are fixed ones
at the headline load 0.85 (large, medium and small gangs' p99 wait at most 0.5, 1 and 1.2 x
bestfit's, allocation at least bestfit's, racks at the lower bound at least 97%, no required
constraint broken), set before measuring and not tuned to the results; and for topogang+defrag against
topogang: large gangs' p99 wait at most 0.7 x topogang's, allocation not lower, fewer than 1 pod moved
per 100 GPU-hours of work (with topogang+defrag the paired comparison is printed against topogang too,
and the tries of gangs that did not fit, by outcome: how often movable pods were what kept them
waiting). Pictures (matplotlib,
`pip install -e '.[bench]'`) go to --pictures DIR (default bench/out): the first trace at the headline load, and
wait p99 per size class and allocation against load.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.tracesim import cluster as clusters
from bench.tracesim import compare, metrics, policies, public, waits, workload
from bench.tracesim.defrag import OUTCOMES, Limits
from bench.tracesim.replay import Replay, replay
from extender.core.reservations import Settings

HEADLINE = 0.85
COLUMNS = (
    ("policy", "policy", "{:<18}"),
    ("alloc", "allocation", "{:>6.1%}"),
    ("racks@LB", "racks_at_lower_bound", "{:>8.1%}"),
    ("racks/LB", "racks_over_bound", "{:>8.3f}"),
    ("stranded", "stranded_gpus", "{:>8.0f}"),
    ("broken", "broken_required", "{:>6d}"),
    ("heldGPUh", "held_idle_gpu_h", "{:>8.0f}"),
    ("backfGPUh", "backfilled_gpu_h", "{:>9.0f}"),
    ("resv", "reservations", "{:>5d}"),
    ("plan ms99", "plan_ms_p99", "{:>9.2f}"),
    ("resv ms99", "reserve_ms_p99", "{:>9.2f}"),
    ("moves/h", "moves_per_hour", "{:>7.1f}"),
    ("mv/100GPUh", "moves_per_100_gpu_h", "{:>10.3f}"),
)
DEFRAG = "topogang+defrag"
WAITS = tuple(
    (f"{s[0].upper()} {q}", f"wait_{q}_{s}_s", "{:>8.0f}") for s in metrics.SIZES for q in ("p50", "p95", "p99", "max")
) + tuple((f"{s[0].upper()} slow", f"slowdown_mean_{s}", "{:>7.1f}") for s in metrics.SIZES)
# The drain (bench/tracesim/replay.py): the part of a gang's wait holding room could not save.
WAITS += tuple((f"{s[0].upper()} drain99", f"drain_p99_{s}_s", "{:>10.0f}") for s in metrics.SIZES[1:])
# Large gangs' p99 at the lowest priority and above it (the class's p99 is nearly always the former's).
WAITS += (("L99 lowest", "wait_p99_large_lowest_s", "{:>10.0f}"), ("L99 above", "wait_p99_large_above_s", "{:>9.0f}"))


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected numbers separated by commas") from None


def _sizes(text: str) -> frozenset[str]:
    out = frozenset(x.strip() for x in text.split(",") if x.strip())
    if not out or not out <= set(metrics.SIZES):
        raise argparse.ArgumentTypeError(f"{text!r}: expected size classes among {', '.join(metrics.SIZES)}")
    return out


def _variant(text: str) -> tuple[str, dict[str, Any]]:
    """NAME:FIELD=VALUE;FIELD=VALUE -> (NAME, Settings fields), typed as Settings declares them."""
    name, _, body = text.partition(":")
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    out: dict[str, Any] = {}
    for item in filter(None, body.split(";")):
        key, _, value = item.partition("=")
        if key not in fields:
            raise argparse.ArgumentTypeError(f"{text!r}: {key!r} is not a Settings field ({', '.join(fields)})")
        kind = str(fields[key].type)
        if value.lower() == "none":
            out[key] = None
        elif kind.startswith("bool"):
            out[key] = value.lower() in ("1", "true", "yes")
        elif kind.startswith("int"):
            out[key] = int(value)
        else:
            out[key] = float(value)
    if not name:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME:FIELD=VALUE;...")
    return name, out


def _policies(cluster: clusters.Cluster, settings: Settings, args: argparse.Namespace) -> list[policies.Policy]:
    extra: list[policies.Policy] = [
        policies.Topogang(cluster, f"topogang+{name}", reserve=dataclasses.replace(settings, **fields))
        for name, fields in args.variant
    ]
    extra += [
        policies.Topogang(cluster, waits.policy_name(label), reserve=dataclasses.replace(settings, max_wait=seconds))
        for label, seconds in args.max_wait
        if seconds is not None
    ]
    limits = Limits(args.moves_per_hour, args.move_cooldown, args.movable_elastic)
    return [*policies.all_policies(cluster, settings, limits), *extra]


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    spec, reserve = workload.TraceSpec(), Settings()
    p.add_argument("--shape", choices=sorted(clusters.SHAPES), default="512")
    p.add_argument("--uneven", action="store_true", help="racks of different sizes (same total)")
    p.add_argument("--cordoned", type=int, default=0, help="nodes marked unschedulable")
    p.add_argument("--profile", choices=[*workload.PROFILES, "synthetic"], default=spec.profile)
    p.add_argument("--jobs", type=int, default=spec.jobs, help="jobs in each generated trace")
    p.add_argument("--loads", type=_floats, default=[0.6, 0.75, 0.85, 0.95], help="offered loads, comma-separated")
    p.add_argument("--load", type=float, help="one offered load (same as --loads LOAD)")
    p.add_argument("--bounded", type=_floats, default=[spec.bounded], help="shares of jobs declaring a runtime bound")
    p.add_argument(
        "--elastic",
        type=float,
        default=spec.elastic,
        help="share of multi-pod jobs that may start with half their pods (0: none, as earlier traces)",
    )
    p.add_argument(
        "--services",
        type=float,
        default=spec.services,
        help="share of the offered GPU demand that is long-running movable services (0: none, as earlier traces)",
    )
    p.add_argument(
        "--moves-per-hour", type=int, default=Limits().per_hour, help="topogang+defrag: pods moved in any hour"
    )
    p.add_argument(
        "--move-cooldown",
        type=float,
        default=Limits().cooldown,
        help="topogang+defrag: seconds before a moved pod moves again",
    )
    p.add_argument(
        "--movable-elastic",
        action="store_true",
        help="topogang+defrag: the pods beyond an unconstrained elastic job's minimum move too",
    )
    p.add_argument("--seed", type=int, default=spec.seed)
    p.add_argument("--seeds", type=int, default=4, help="traces generated (seeds SEED, SEED+1...); figures are means")
    p.add_argument("--reserve-after", type=float, default=reserve.reserve_after, help="seconds before a reservation")
    p.add_argument("--reservations", type=int, default=reserve.limit, help="reservations at once")
    p.add_argument(
        "--variant",
        action="append",
        type=_variant,
        default=[],
        metavar="NAME:FIELD=VALUE;...",
        help="one more policy, topogang+NAME, with these reservation Settings fields changed (repeatable),"
        " e.g. --variant 'large:coarsest_only=1;hold_within=1800'",
    )
    p.add_argument(
        "--max-wait",
        type=waits.maxima,
        default=[],
        metavar="MAX,...",
        help="a policy per maximum wait (off: topogang+reserve; else topogang+wait<MAX>, e.g. 30m), and the sweep's"
        " table, targets and picture",
    )
    p.add_argument("--trace", type=Path, help="replay this CSV instead of generating traces (loads do not apply)")
    p.add_argument(
        "--public",
        type=Path,
        help="a public trace (AcmeTrace trace_*.csv, Helios cluster_log.csv): --seeds windows of --jobs GPU jobs",
    )
    p.add_argument("--skip", type=int, default=0, help="GPU jobs of --public skipped before the first window")
    p.add_argument("--write-trace", type=Path, help="write the first generated trace as CSV and go on")
    p.add_argument("--relax", action="store_true", help="drop every required constraint: what the constraints cost")
    p.add_argument(
        "--one-priority",
        action="store_true",
        help="every job at priority 0: what queueing behind higher priorities costs the lowest",
    )
    p.add_argument(
        "--sizes",
        type=_sizes,
        help="replay only the jobs of these size classes (comma-separated: small,medium,large): what they wait for"
        " among themselves",
    )
    p.add_argument("--policies", default="", help="comma-separated subset (default: all)")
    p.add_argument("--paired", default="bestfit", help="policy the others are compared with, trace by trace")
    p.add_argument("--warmup", type=float, default=0.1, help="share of arrivals before measuring")
    p.add_argument("--json", action="store_true", help="one JSON object per policy, load and bounded share")
    p.add_argument("--json-out", type=Path, help="also write those objects to this file")
    p.add_argument("--pictures", type=Path, default=Path(__file__).parent / "out", help="where the PNGs go")
    p.add_argument("--no-pictures", action="store_true")
    args = p.parse_args(argv)
    if not 0 <= args.services < 1:
        p.error(f"--services {args.services:g}: expected a share in [0, 1)")
    if args.moves_per_hour < 0 or args.move_cooldown < 0:
        p.error("--moves-per-hour and --move-cooldown: expected numbers >= 0")
    if args.load is not None:
        args.loads = [args.load]
    return args


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    shape = dataclasses.replace(clusters.SHAPES[args.shape], uneven=args.uneven, cordoned=args.cordoned, seed=args.seed)
    cluster = clusters.build(shape)
    settings = Settings(reserve_after=args.reserve_after, limit=args.reservations)
    names = [p.name for p in _policies(cluster, settings, args)]
    swept = [waits.policy_name(label) for label, _ in args.max_wait]
    asked = [*args.policies.split(","), *(f"topogang+{n}" for n, _ in args.variant), *swept]
    wanted = asked if args.policies else names
    if not set(wanted) <= set(names):
        print(f"trace.py: --policies {args.policies}: choose from {', '.join(names)}", file=sys.stderr)
        return 2
    settings_runs: list[tuple[float, float, list[list[workload.Job]]]] = []
    if args.trace:
        try:
            settings_runs.append((float("nan"), float("nan"), [workload.read_csv(args.trace)]))
        except (OSError, workload.TraceError) as exc:
            print(f"trace.py: {exc}", file=sys.stderr)
            return 2
    else:
        for load in args.loads:
            for bounded in args.bounded:
                try:
                    traces = [_trace(args, cluster, load, bounded, k) for k in range(args.seeds)]
                except (OSError, workload.TraceError) as exc:
                    print(f"trace.py: {exc}", file=sys.stderr)
                    return 2
                settings_runs.append((load, bounded, traces))
    settings_runs = [(ld, b, [_as_asked(t, cluster, args) for t in ts]) for ld, b, ts in settings_runs]
    for _, _, ts in settings_runs:
        for t in ts:
            if not _measurable(t, args.warmup):
                print(
                    "trace.py: a trace (after --sizes) needs jobs arriving at two moments at least after its warm-up"
                    f" share (--warmup {args.warmup:g}); the figures are measured between them",
                    file=sys.stderr,
                )
                return 2
    if args.write_trace:
        workload.write_csv(settings_runs[0][2][0], args.write_trace)
    if not args.json:
        print(describe(cluster, args, settings))
    every: list[dict[str, Any]] = []
    pictured: tuple[list[workload.Job], list[Replay]] | None = None
    for load, bounded, traces in settings_runs:
        per_trace: list[list[dict[str, Any]]] = []
        for i, jobs in enumerate(traces):
            rows, runs = [], []
            for policy in _policies(cluster, settings, args):
                if policy.name not in wanted:
                    continue
                start = time.perf_counter()
                run = replay(cluster, jobs, policy, args.warmup)
                row = metrics.summarize(cluster, jobs, run, args.warmup)
                row["replay_s"] = round(time.perf_counter() - start, 1)
                rows.append(row)
                runs.append(run)
            per_trace.append(rows)
            if i == 0 and (pictured is None or load == HEADLINE):
                pictured = (jobs, runs)
        rows = [metrics.combine([t[k] for t in per_trace]) for k in range(len(per_trace[0]))]
        for row in rows:
            row |= {"load": load, "bounded": bounded, "shape": args.shape, "profile": args.profile}
            row |= {"reserve_after_s": args.reserve_after, "reservation_limit": args.reservations}
        every += rows
        if args.json:
            for row in rows:
                sys.stdout.write(orjson.dumps(row, option=orjson.OPT_SERIALIZE_NUMPY).decode() + "\n")
            sys.stdout.flush()
        else:
            print(f"\nload {load:g}, {bounded:.0%} of jobs with a runtime bound:", flush=True)
            print(table(rows, COLUMNS))
            print(table(rows, WAITS))
            print(spread(rows))
            print(compare.describe(rows, args.paired))
            if args.paired != "topogang" and {DEFRAG, "topogang"} <= {r["policy"] for r in rows}:
                print(compare.describe(rows, "topogang", frozenset({DEFRAG})))
            print(defrag_tries(rows))
            print(first_fit_gap(rows), flush=True)
            if args.max_wait:
                print(waits.describe(rows, args.max_wait, args.paired), flush=True)
    if args.json_out:
        args.json_out.write_bytes(b"".join(orjson.dumps(r, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n" for r in every))
    if not args.json:
        print(targets(every))
    if not args.no_pictures:
        _pictures(cluster, every, pictured, args.pictures, args.max_wait)
    return 0


def _as_asked(jobs: list[workload.Job], cluster: clusters.Cluster, args: argparse.Namespace) -> list[workload.Job]:
    """One trace as the flags ask: only the --sizes classes, without constraints (--relax), every
    job at priority 0 (--one-priority)."""
    if args.sizes:
        jobs = [j for j in jobs if metrics.size_class(cluster, j) in args.sizes]
    if args.relax:
        jobs = [dataclasses.replace(j, segment=0, segment_level="", job_level="") for j in jobs]
    if args.one_priority:
        jobs = [dataclasses.replace(j, priority=0) for j in jobs]
    return jobs


def _measurable(jobs: list[workload.Job], warmup: float) -> bool:
    """Whether the measured window (workload.window) of JOBS has a length: the figures are means over it."""
    if not jobs:
        return False
    start, end = workload.window(jobs, warmup)
    return start < end


def _trace(
    args: argparse.Namespace, cluster: clusters.Cluster, load: float, bounded: float, k: int
) -> list[workload.Job]:
    if args.public:
        skip = args.skip + k * args.jobs
        return public.read_public(
            args.public, cluster, args.jobs, load, bounded, args.seed + k, skip, args.elastic, args.services
        )
    spec = workload.TraceSpec(
        args.jobs, load, args.profile, bounded, seed=args.seed + k, elastic=args.elastic, services=args.services
    )
    return workload.generate(spec, cluster)


def _pictures(
    cluster: clusters.Cluster,
    rows: list[dict[str, Any]],
    pictured: tuple[list[workload.Job], list[Replay]] | None,
    out: Path,
    max_wait: list[tuple[str, float | None]],
) -> None:
    if importlib.util.find_spec("matplotlib") is None:  # figures.py imports it only when drawing
        print("matplotlib is not installed (pip install -e '.[bench]'): no pictures", file=sys.stderr)
        return
    from bench.tracesim.figures import draw, draw_loads

    paths = draw(cluster, pictured[0], pictured[1], out) if pictured else []
    paths += draw_loads(rows, out)
    if max_wait:
        at = [r for r in rows if r["load"] == HEADLINE] or rows
        paths += waits.draw(at, max_wait, out)
    for path in paths:
        print(f"picture: {path}", file=sys.stderr)


def describe(cluster: clusters.Cluster, args: argparse.Namespace, settings: Settings) -> str:
    s = cluster.shape
    rack = int(cluster.domain_gpus("rack").max())
    block = int(cluster.domain_gpus("block").max())
    held = "the fewest children of" if settings.children else "all of"
    source = (
        f"--trace {args.trace}" if args.trace else f"profile {args.profile}, {args.seeds} traces of {args.jobs} jobs"
    )
    return (
        f"cluster {args.shape}: {len(cluster.nodes)} nodes of {s.gpus} GPUs, {cluster.capacity} schedulable GPUs,"
        f" {s.zones} zones > {s.blocks} blocks > {s.racks} racks{' (uneven)' if s.uneven else ''},"
        f" {s.cordoned} cordoned\n"
        f"trace: {source}, {args.elastic:.0%} of multi-pod jobs elastic,"
        f" {0 if args.trace else args.services:.0%} of the GPU demand long-running movable services;"
        f" sizes: S <= {rack} GPUs (a rack), M <= {block} (a block), L larger\n"
        f"reservations (topogang+reserve): after {settings.reserve_after:g} s or first at its priority,"
        f" at most {settings.limit}, unbounded pods expected to run {settings.stretch:g} x as long again"
        f" (at least {settings.floor:g} s), {held} the domain held\n"
        f"moves (topogang+defrag): at most {args.moves_per_hour} pods an hour, none again within"
        f" {args.move_cooldown:g} s; {'services and elastic optional pods' if args.movable_elastic else 'services'}"
        " movable"
    )


def table(rows: list[dict[str, Any]], columns: tuple[tuple[str, str, str], ...]) -> str:
    head = " ".join(f"{h:>{len(fmt.format(rows[0][k]))}}" if h != "policy" else f"{h:<18}" for h, k, fmt in columns)
    lines = [head if columns[0][0] == "policy" else f"{'waits (s)':<18} {head}"]
    for row in rows:
        cells = " ".join(fmt.format(row[k]) for _, k, fmt in columns)
        lines.append(cells if columns[0][0] == "policy" else f"{row['policy']:<18} {cells}")
    return "\n".join(lines)


def spread(rows: list[dict[str, Any]]) -> str:
    if rows[0]["traces"] < 2:
        return ""
    lines = ["p99 waits, lowest..highest of the traces (s):"]
    for r in rows:
        cells = []
        for size in ("small", "medium", "large"):
            v = r[f"wait_p99_{size}_s_per_trace"]
            cells.append(f"{size[0].upper()} {min(v):.0f}..{max(v):.0f}")
        lines.append(f"  {r['policy']:<18} " + "  ".join(cells))
    return "\n".join(lines)


def defrag_tries(rows: list[dict[str, Any]]) -> str:
    """topogang+defrag: the tries of gangs that did not fit, by size and outcome (summed over traces)."""
    row = next((r for r in rows if r["policy"] == DEFRAG), None)
    if row is None:
        return ""
    lines = [f"{DEFRAG}: tries of gangs (arrived in the window) that did not fit, summed over the traces:"]
    for size in metrics.SIZES:
        cells = ", ".join(f"{o} {row[f'defrag_{size}_{o}']}" for o in OUTCOMES)
        lines.append(f"  {size:<7} {cells}")
    lines.append(
        f"  large gangs that did not fit at once: {row['defrag_large_waited']}, of which every try blocked by work"
        f" that stays (not movable): {row['defrag_large_only_blocked']}"
    )
    lines.append("  (" + "; ".join(f"{o}: {why}" for o, why in OUTCOMES.items()) + ")")
    return "\n".join(lines)


def first_fit_gap(rows: list[dict[str, Any]]) -> str:
    by = {r["policy"]: r for r in rows}
    if "first-fit" not in by:
        return ""
    ff = by["first-fit"]["allocation"]
    gaps = ", ".join(f"{r['policy']} {(r['allocation'] - ff) * 100:+.1f}" for r in rows if r["policy"] != "first-fit")
    return f"allocation against topology-blind first fit ({ff:.1%}), points: {gaps}"


def targets(rows: list[dict[str, Any]]) -> str:
    """The quality targets at the headline load (or the load nearest it)."""
    loads = sorted({r["load"] for r in rows if r["load"] == r["load"]})
    if not loads:
        return ""
    load = min(loads, key=lambda x: abs(x - HEADLINE))
    shares = sorted({r["bounded"] for r in rows if r["load"] == load})
    share = 0.5 if 0.5 in shares else shares[0]
    at = [r for r in rows if r["load"] == load and r["bounded"] == share]
    by = {r["policy"]: r for r in at}
    out = [f"\ntargets at load {load:g}, {share:.0%} of jobs bounded (waits compared in whole seconds):"]
    for r in at:
        if r["topology_aware"] and r["broken_required"]:
            out.append(f"  {r['policy']}: {r['broken_required']} required constraints broken (target 0): MISSED")
    bf = by.get("bestfit")
    for name in [r["policy"] for r in at if r["policy"].startswith("topogang") and r["policy"] != "topogang-loose"]:
        tg = by.get(name)
        if tg is None or bf is None:
            continue
        checks = [
            ("large p99 wait", "wait_p99_large_s", 0.5, "<= 0.5 x bestfit's"),
            ("medium p99 wait", "wait_p99_medium_s", 1.0, "<= bestfit's"),
            ("small p99 wait", "wait_p99_small_s", 1.2, "<= 1.2 x bestfit's"),
        ]
        for what, key, factor, rule in checks:
            mine, bound = tg[key], factor * bf[key]
            ok = round(mine) <= round(bound)
            paired = compare.against(tg, bf, key)
            out.append(f"  {name}: {what} {mine:.0f} s, target {rule} ({bound:.0f} s): {_v(ok)}{paired}")
        alloc, theirs = tg["allocation"], bf["allocation"]
        out.append(
            f"  {name}: allocation {alloc:.1%} vs bestfit's {theirs:.1%} (target >=): {_v(alloc >= theirs)}"
            + compare.against(tg, bf, "allocation", 100.0, "pt")
        )
        lb = tg["racks_at_lower_bound"]
        out.append(f"  {name}: racks at the lower bound {lb:.1%} (target >= 97%): {_v(lb >= 0.97)}")
        out.append(f"  {name}: required constraints broken {tg['broken_required']} (target 0)")
    out += defrag_targets(by)
    return "\n".join(out)


def defrag_targets(by: dict[str, dict[str, Any]]) -> list[str]:
    """topogang+defrag against topogang: large p99 <= 0.7 x, allocation not lower, < 1 move per 100 GPU-h."""
    mine, base = by.get(DEFRAG), by.get("topogang")
    if mine is None or base is None:
        return []
    p99, bound = mine["wait_p99_large_s"], 0.7 * base["wait_p99_large_s"]
    alloc, theirs = mine["allocation"], base["allocation"]
    rate = mine["moves_per_100_gpu_h"]
    return [
        f"  {DEFRAG}: large p99 wait {p99:.0f} s, target <= 0.7 x topogang's ({bound:.0f} s):"
        f" {_v(round(p99) <= round(bound))}{compare.against(mine, base, 'wait_p99_large_s')}",
        f"  {DEFRAG}: allocation {alloc:.1%} vs topogang's {theirs:.1%} (target >=): {_v(alloc >= theirs)}"
        + compare.against(mine, base, "allocation", 100.0, "pt"),
        f"  {DEFRAG}: {rate:.3f} pods moved per 100 GPU-hours of work ({mine['moves_per_hour']:.1f} an hour,"
        f" {mine['moves']} in all), target < 1: {_v(rate < 1)}",
    ]


def _v(ok: bool) -> str:
    return "met" if ok else "MISSED"


if __name__ == "__main__":
    sys.exit(main())
