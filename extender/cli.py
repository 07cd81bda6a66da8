"""The `topogang` command: `simulate` runs the extender's logic over YAML; `serve` runs the extender."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from extender import __version__

# `topogang simulate`'s exit codes (its --help and docs/cli.md list them)
EXIT_UNREADABLE = 2  # input that cannot be read: nothing simulated
EXIT_INVALID = 3  # simulated, but some gang or object is Invalid


def _simulate(args: argparse.Namespace) -> int:
    from extender.simulate.loader import InputError, load
    from extender.simulate.render import to_json, to_text
    from extender.simulate.runner import simulate

    try:
        result = simulate(load(args.file))
    except InputError as exc:
        print(f"topogang simulate: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    if args.output == "json":
        print(to_json(result))
        for warning in result.warnings:  # in the document too; said where a person sees them
            print(f"topogang simulate: warning: {warning}", file=sys.stderr)
    else:
        print(to_text(result))
    if invalid := result.invalid:
        shown = ", ".join(invalid[:6]) + (f" and {len(invalid) - 6} more" if len(invalid) > 6 else "")
        print(f"topogang simulate: Invalid: {shown} (exit {EXIT_INVALID})", file=sys.stderr)
        return EXIT_INVALID
    return 0


def _explain(args: argparse.Namespace) -> int:
    from extender import logs
    from extender.core.explain import explain, render
    from extender.core.explain_names import resolve

    logs.configure(args.log_level, "console", cache=False)  # on stderr: stdout carries the explanation alone

    if args.file:
        from extender.simulate.loader import InputError, load
        from extender.simulate.runner import Simulation

        try:
            simulation = Simulation(load(args.file))
        except InputError as exc:
            print(f"topogang explain: {exc}", file=sys.stderr)
            return 2
        simulation.run()
        scheduler = simulation.scheduler
    else:
        import asyncio

        from extender.kube.client import ClusterConfigError
        from extender.server.live import synced_scheduler

        try:
            scheduler = asyncio.run(synced_scheduler(args.kubeconfig, args.timeout))
        except ClusterConfigError as exc:
            where = "set --kubeconfig or KUBECONFIG to a kubeconfig, run it in a pod, or explain a simulation (-f)"
            print(f"topogang explain: {exc}; {where}", file=sys.stderr)
            return 2
        except (OSError, TimeoutError) as exc:
            print(f"topogang explain: cannot read the cluster: {exc}", file=sys.stderr)
            return 2
    named = resolve(scheduler, args.name)
    if not named.groups:
        print(f"topogang explain: {named.problem}", file=sys.stderr)
        return 1
    explanations = [explain(scheduler, g, named.pod) for g in named.groups]
    if args.output == "json":
        import orjson

        from extender.core.explain_json import document

        sys.stdout.write(orjson.dumps(document(explanations), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(render(explanations), end="")
    return 0


def _serve(args: argparse.Namespace) -> int:
    import os

    from extender.server.serve import run

    return run(args, os.environ)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="topogang", description="Whole-gang, topology-aware placement for Kubernetes."
    )
    parser.add_argument("--version", action="version", version=f"topogang {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sim = sub.add_parser(
        "simulate",
        help="place the pods of Kubernetes YAML on its nodes, offline",
        description="Run topogang's planning and the extender's decisions over Kubernetes objects read from "
        "files, directories (their *.yaml, *.yml, *.json and those of their subfolders, by path; hidden ones "
        "skipped) or - for stdin. Pods with spec.nodeName are running; every other pod is scheduled as "
        "kube-scheduler with topogang would.",
        epilog=f"Exit status: 0 simulated; {EXIT_UNREADABLE} input that cannot be read (file and line on stderr; "
        f"nothing simulated); {EXIT_INVALID} simulated, but a gang or an object is Invalid (its message says why), "
        "for a CI pipeline to gate on. Warnings (objects the simulation could not use) leave it 0.",
    )
    sim.add_argument(
        "-f",
        "--file",
        action="append",
        required=True,
        metavar="PATH",
        help="a file, a directory or - (stdin); repeat -f for more, read in the order given",
    )
    sim.add_argument("-o", "--output", choices=("text", "json"), default="text", help="text (default) or json")
    sim.set_defaults(func=_simulate)
    from extender.server.gates_settings import add_gates_arguments
    from extender.server.settings import add_arguments

    srv = sub.add_parser(
        "serve",
        help="run the scheduler extender that kube-scheduler calls",
        description="Serve kube-scheduler's extender API (filter, prioritize, bind, preempt) over a live cache "
        "of the cluster, over mTLS (--tls-cert, --tls-key, --client-ca) or, for local runs, plain HTTP "
        "(--insecure-http). Every flag can be set instead by the environment variable named in its help "
        "(in parentheses, with the default); a flag wins over its variable.",
        epilog="Also read: POD_NAME and POD_NAMESPACE (the downward API: the Lease identity and namespace, and "
        "the pod the leader labels scheduling.topogang.io/leader=true).",
    )
    add_arguments(srv)
    add_gates_arguments(srv)
    srv.set_defaults(func=_serve)
    exp = sub.add_parser(
        "explain",
        help="why a gang is where it is, or is not placed",
        description="Explain a gang: its SubGroup tree, each constraint, where its pods are or would go and why "
        "there (the planner's ranking of the candidate domains, and what the runner-up lacked), the nodes left out "
        "with counts by reason, and what evicted or moved it and when. NAME is a PodGroup, a workload or a pod "
        "(explained through its gang), as namespace/name; a gang or pod topogang evicted is still found. Reads a "
        "live cluster (--kubeconfig, else KUBECONFIG or in-cluster), or a simulation input (-f).",
    )
    exp.add_argument("name", metavar="NAMESPACE/NAME")
    exp.add_argument(
        "-o", "--output", choices=("text", "json"), default="text", help="text (default) or json (see docs/cli.md)"
    )
    exp.add_argument(
        "-f", "--file", action="append", metavar="PATH", help="explain against a simulation of these files"
    )
    exp.add_argument("--kubeconfig", metavar="PATH", help="the cluster to read (default: KUBECONFIG, else in-cluster)")
    exp.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the cluster's objects (60)")
    exp.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="warning",
        help="logs (to stderr) at this level and above (warning)",
    )
    exp.set_defaults(func=_explain)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except BrokenPipeError:  # `topogang simulate ... | head`: the reader has seen enough
        sys.stderr.close()
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
