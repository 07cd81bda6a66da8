"""Settings of `topogang serve`, from flags and environment variables (flags win).

listen address      --listen          TOPOGANG_LISTEN         0.0.0.0:8888
URL prefix          --url-prefix      TOPOGANG_URL_PREFIX     /topogang
cluster access      --kubeconfig      TOPOGANG_KUBECONFIG, KUBECONFIG (else in-cluster)
bind gate silence   --bind-timeout    TOPOGANG_BIND_TIMEOUT   25 (seconds without a new member
                                                              of the minimum reaching bind
                                                              before a gang's plan is released)
bind call budget    --bind-call-budget  TOPOGANG_BIND_CALL_BUDGET  20 (seconds one bind call waits
                                                              at the gate before a retryable
                                                              answer; keep it under the extender
                                                              httpTimeout, 30s in scheduler-config/)
recovery grace      --recovery-grace  TOPOGANG_RECOVERY_GRACE 30 (seconds: a gang found with part of
                                                              its minimum bound at start has the
                                                              bind timeout plus this to complete,
                                                              else its bound pods are evicted)
plan lifetime       --plan-ttl        TOPOGANG_PLAN_TTL       300 (seconds without progress)
preemption timeout  --preemption-timeout  TOPOGANG_PREEMPTION_TIMEOUT  60 (seconds for a gang's
                                                              victims to leave before the room
                                                              held for it is released)
nomination          --nominate        TOPOGANG_NOMINATE       true (steer planned members with
                                                              status.nominatedNodeName, which
                                                              kube-scheduler 1.35+ tries first;
                                                              false for older ones, configured
                                                              with percentageOfNodesToScore: 100)
binding ahead       --bind-ahead      TOPOGANG_BIND_AHEAD     true (a gang planned whose pods need
                                                              nothing but what the plan judges is
                                                              bound at once, all of it, without
                                                              waiting for each member's bind call;
                                                              see core/binding.py. false: every
                                                              member comes to the gate)
repair timeout      --repair-timeout  TOPOGANG_REPAIR_TIMEOUT  300 (seconds a running gang that
                                                              lost pods may stay broken, no part
                                                              of it able to move, before it is
                                                              declared Unrepairable and, if it
                                                              asks, evicted whole)
reservations        --reservations    TOPOGANG_RESERVATIONS   1 (gangs that may hold room at once
                                                              while they wait; 0: none. See
                                                              core/reservations.py)
                    --reserve-after   TOPOGANG_RESERVE_AFTER  1800 (seconds a gang waits for room
                                                              before it may hold some; the first
                                                              gang in queue order at each priority
                                                              may at once)
                    --reserve-order   TOPOGANG_RESERVE_ORDER  queue (who of the gangs that may hold
                                                              room gets the slots: queue order, or
                                                              largest: those that need the coarsest
                                                              domain first, for clusters whose jobs
                                                              share one priority)
                    --reserve-level   TOPOGANG_RESERVE_LEVEL  any (only gangs that need a domain of
                                                              this level, e.g. topology.kubernetes.io/zone,
                                                              or a coarser one may hold room)
maximum wait        --max-wait        TOPOGANG_MAX_WAIT       off (a duration such as 2h: a gang
                                                              waiting for room longer is overdue and
                                                              takes a reservation slot first; its
                                                              held room is kept from work that is
                                                              not overdue, whatever its priority.
                                                              Gangs may set their own with
                                                              scheduling.topogang.io/max-wait)
estimated starts    --estimate-gangs  TOPOGANG_ESTIMATE_GANGS 50 (the first this many gangs waiting
                                                              get an estimated start at each pass;
                                                              0: none)
                    --estimates-per-pass  TOPOGANG_ESTIMATES_PER_PASS  10 (gangs of that walk
                                                              estimated per pass; 0: all)
log level / format  --log-level, --log-format  TOPOGANG_LOG_LEVEL, TOPOGANG_LOG_FORMAT
request body limit  --max-body        TOPOGANG_MAX_BODY       32 (MiB; see server/limits.py)

Transport: mTLS (kube-scheduler presents a client certificate) unless plain HTTP is asked for:
serving cert, key   --tls-cert, --tls-key  TOPOGANG_TLS_CERT, TOPOGANG_TLS_KEY  (PEM files)
clients' CA         --client-ca       TOPOGANG_CLIENT_CA      (PEM; a client certificate from
                                                              this CA is required)
plain HTTP          --insecure-http   TOPOGANG_INSECURE_HTTP  false (local runs only)
probes              --health-listen   TOPOGANG_HEALTH_LISTEN  off; HOST:PORT of a plain-HTTP
                                                              listener with only /healthz,
                                                              /synced, /readyz and /metrics, for
                                                              the kubelet's probes (which
                                                              present no client certificate)

Leader election (two replicas; only the Lease holder plans, binds and writes PodGroups):
on or off           --leader-elect    TOPOGANG_LEADER_ELECT   true in-cluster, false with a
                                                              kubeconfig (a laptop, the e2e
                                                              tests: one process, no Lease)
Lease               --lease-namespace TOPOGANG_LEASE_NAMESPACE  POD_NAMESPACE, else the
                                                              ServiceAccount's namespace, else
                                                              default
                    --lease-name      TOPOGANG_LEASE_NAME     topogang
timing (seconds)    --lease-duration  TOPOGANG_LEASE_DURATION 15 (kube-scheduler's defaults)
                    --lease-renew-deadline  TOPOGANG_LEASE_RENEW_DEADLINE  10
                    --lease-retry-period    TOPOGANG_LEASE_RETRY_PERIOD    2
identity            POD_NAME, else the hostname with a random suffix
own pod             POD_NAME in POD_NAMESPACE (the downward API): the leader labels it
                    scheduling.topogang.io/leader=true, which the Service selects; either unset
                    (a laptop, the e2e tests): no label

Every boolean flag (BOOL_FLAGS) is written alike: `--flag` alone is true, and `--flag=true`,
`--flag=false` or `--flag false` (1 and 0 too) say it; its variable takes the same values.
"""

from __future__ import annotations

import argparse
import socket
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from extender import logs
from extender.core.moves import MoveSettings
from extender.server.limits import DEFAULT_MAX_BODY_MIB
from extender.server.reservation_flags import (
    RESERVATION_DEFAULTS,
    estimate_gangs,
    estimates_per_pass,
    max_wait_flag,
    reservations,
)
from extender.server.settings_error import SettingsError, whole_number
from extender.server.tls import TlsFiles

MOVE_DEFAULTS = MoveSettings()
MAX_MOVES_PER_HOUR = 10_000

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True)
class Settings:
    host: str = "0.0.0.0"
    port: int = 8888
    prefix: str = "/topogang"
    kubeconfig: str | None = None  # None: in-cluster
    bind_timeout: float = 25.0
    bind_call_budget: float = 20.0
    recovery_grace: float = 30.0
    plan_ttl: float = 300.0
    preemption_timeout: float = 60.0
    repair_timeout: float = 300.0
    reservations: int = RESERVATION_DEFAULTS.limit  # gangs holding room at once; 0: none
    reserve_after: float = RESERVATION_DEFAULTS.reserve_after
    reserve_largest_first: bool = RESERVATION_DEFAULTS.largest_first  # --reserve-order largest
    reserve_level: str | None = None  # --reserve-level: only gangs of this level or coarser hold room
    max_wait: float | None = RESERVATION_DEFAULTS.max_wait  # --max-wait; None: off
    estimate_gangs: int = RESERVATION_DEFAULTS.estimates  # --estimate-gangs
    estimates_per_pass: int = RESERVATION_DEFAULTS.estimates_per_pass  # --estimates-per-pass
    nominate: bool = True  # steer planned members with status.nominatedNodeName (kube-scheduler 1.35+)
    bind_ahead: bool = True  # bind a planned gang at once when kube-scheduler has nothing to add (core/binding.py)
    defragment: bool = True  # move movable pods out of a domain a waiting gang needs whole (core/defragmenting.py)
    moves_per_hour: int = MOVE_DEFAULTS.per_hour
    move_cooldown: float = MOVE_DEFAULTS.cooldown
    move_controllers: bool = False  # every pod of a Deployment, ReplicaSet or StatefulSet is movable
    log_level: str = "info"
    log_format: str = "auto"
    leader_elect: bool = False
    lease_namespace: str = "default"
    lease_name: str = "topogang"
    lease_duration: float = 15.0
    lease_renew_deadline: float = 10.0
    lease_retry_period: float = 2.0
    identity: str = ""
    pod_name: str | None = None  # the pod the leader labels; None: not in a pod
    pod_namespace: str | None = None
    tls: TlsFiles | None = None  # None: plain HTTP, only with insecure_http
    insecure_http: bool = False
    health: tuple[str, int] | None = None  # the plain-HTTP probe listener, when asked for
    max_body: int = DEFAULT_MAX_BODY_MIB * 2**20


# Every flag of `topogang serve` that takes a value but no boolean: (flag, metavar, help); the
# help names the environment variable and the default.
FLAGS: tuple[tuple[str, str, str], ...] = (
    ("--listen", "HOST:PORT", "address to serve on (TOPOGANG_LISTEN; 0.0.0.0:8888)"),
    ("--url-prefix", "PATH", "path before /filter etc. (TOPOGANG_URL_PREFIX; /topogang)"),
    ("--kubeconfig", "PATH", "kubeconfig (TOPOGANG_KUBECONFIG, KUBECONFIG; else in-cluster)"),
    (
        "--bind-timeout",
        "SECONDS",
        "release a gang's plan when no new member reached bind this long (TOPOGANG_BIND_TIMEOUT; 25)",
    ),
    (
        "--bind-call-budget",
        "SECONDS",
        "longest one bind call waits at the gate; keep it under httpTimeout (TOPOGANG_BIND_CALL_BUDGET; 20)",
    ),
    (
        "--recovery-grace",
        "SECONDS",
        "a gang part-bound at start gets the bind timeout plus this, else its bound pods are evicted"
        " (TOPOGANG_RECOVERY_GRACE; 30)",
    ),
    ("--plan-ttl", "SECONDS", "release a plan idle this long (TOPOGANG_PLAN_TTL; 300)"),
    (
        "--preemption-timeout",
        "SECONDS",
        "how long a gang's victims may take to leave (TOPOGANG_PREEMPTION_TIMEOUT; 60)",
    ),
    (
        "--repair-timeout",
        "SECONDS",
        "how long a running gang that lost pods may stay broken before it is Unrepairable"
        " (TOPOGANG_REPAIR_TIMEOUT; 300)",
    ),
    (
        "--reservations",
        "N",
        f"gangs that may hold room at once while they wait; 0: none"
        f" (TOPOGANG_RESERVATIONS; {RESERVATION_DEFAULTS.limit})",
    ),
    (
        "--reserve-after",
        "SECONDS",
        f"how long a gang waits for room before it may hold some"
        f" (TOPOGANG_RESERVE_AFTER; {RESERVATION_DEFAULTS.reserve_after:g})",
    ),
    (
        "--reserve-order",
        "ORDER",
        "who of the gangs that may hold room gets the slots: queue (queue order) or largest (those that need"
        " the coarsest domain first, then the most pods; for clusters whose jobs share one priority)"
        " (TOPOGANG_RESERVE_ORDER; queue)",
    ),
    (
        "--reserve-level",
        "LEVEL",
        "only gangs that need a domain of this topology level (a node label such as"
        " topology.kubernetes.io/zone, or its short name) or a coarser one may hold room; a Topology"
        " without it: any gang (TOPOGANG_RESERVE_LEVEL; any)",
    ),
    (
        "--max-wait",
        "DURATION",
        "a gang waiting for room longer than this (e.g. 2h) is overdue: it takes a reservation slot first, and"
        " the room held for it is kept from work of any priority that is not overdue; gangs may set their own"
        " with scheduling.topogang.io/max-wait (TOPOGANG_MAX_WAIT; off)",
    ),
    (
        "--estimate-gangs",
        "N",
        f"the first N gangs waiting for room get an estimated start at each pass; 0: none"
        f" (TOPOGANG_ESTIMATE_GANGS; {RESERVATION_DEFAULTS.estimates})",
    ),
    (
        "--estimates-per-pass",
        "N",
        "one walk of those gangs is spread over passes, N gangs a pass (each one search over the running pods'"
        f" ends), so a pass's cost does not grow with --estimate-gangs; 0: the whole walk in every pass"
        f" (TOPOGANG_ESTIMATES_PER_PASS; {RESERVATION_DEFAULTS.estimates_per_pass})",
    ),
    (
        "--moves-per-hour",
        "N",
        "most pods moved in any hour to make a domain whole for a waiting gang, cluster-wide"
        f" (TOPOGANG_MOVES_PER_HOUR; {MOVE_DEFAULTS.per_hour})",
    ),
    (
        "--move-cooldown",
        "SECONDS",
        f"a moved pod, and the pod that replaced it, stay in place this long (TOPOGANG_MOVE_COOLDOWN;"
        f" {MOVE_DEFAULTS.cooldown:g})",
    ),
    ("--log-level", "LEVEL", "debug, info, warning, error (TOPOGANG_LOG_LEVEL; info)"),
    ("--log-format", "FORMAT", "json, console or auto (TOPOGANG_LOG_FORMAT; auto)"),
    ("--lease-namespace", "NS", "the Lease's namespace (TOPOGANG_LEASE_NAMESPACE; the pod's own)"),
    ("--lease-name", "NAME", "the Lease's name (TOPOGANG_LEASE_NAME; topogang)"),
    ("--lease-duration", "SECONDS", "how long a Lease holds unrenewed (TOPOGANG_LEASE_DURATION; 15)"),
    (
        "--lease-renew-deadline",
        "SECONDS",
        "the leader steps down after failing to renew this long (TOPOGANG_LEASE_RENEW_DEADLINE; 10)",
    ),
    ("--lease-retry-period", "SECONDS", "between renewals and between attempts (TOPOGANG_LEASE_RETRY_PERIOD; 2)"),
    ("--tls-cert", "PATH", "PEM serving certificate (TOPOGANG_TLS_CERT)"),
    ("--tls-key", "PATH", "PEM key of --tls-cert (TOPOGANG_TLS_KEY)"),
    ("--client-ca", "PATH", "PEM CA of the clients: a client certificate it signed is required (TOPOGANG_CLIENT_CA)"),
    (
        "--health-listen",
        "HOST:PORT",
        "plain-HTTP listener for probes: /healthz /synced /readyz /metrics only (TOPOGANG_HEALTH_LISTEN; off)",
    ),
    ("--max-body", "MIB", f"largest request body, in MiB; larger is a 413 (TOPOGANG_MAX_BODY; {DEFAULT_MAX_BODY_MIB})"),
)


# The boolean flags: (flag, help). Each takes `--flag` (true) or `--flag=true|false`.
BOOL_FLAGS: tuple[tuple[str, str], ...] = (
    (
        "--nominate",
        "steer planned gang members with status.nominatedNodeName; false for kube-scheduler before 1.35,"
        " whose configuration must then set percentageOfNodesToScore: 100 (TOPOGANG_NOMINATE; true)",
    ),
    (
        "--bind-ahead",
        "bind a gang as it is planned, all of it, when its pods need nothing but what the plan judges"
        " (no volume or resource claims, host ports, inter-pod affinity, spread constraints);"
        " false: each member waits for its own bind call (TOPOGANG_BIND_AHEAD; true)",
    ),
    (
        "--defragment",
        "move movable pods (scheduling.topogang.io/movable) out of a domain a waiting gang needs whole,"
        " each to room held for it elsewhere (TOPOGANG_DEFRAGMENT; true)",
    ),
    (
        "--move-controllers",
        "every pod of a Deployment, ReplicaSet or StatefulSet is movable unless it says"
        ' scheduling.topogang.io/movable: "false" (TOPOGANG_MOVE_CONTROLLERS; false)',
    ),
    (
        "--leader-elect",
        "elect a leader on a Lease (TOPOGANG_LEADER_ELECT; true in-cluster, false with a kubeconfig)",
    ),
    ("--insecure-http", "serve plain HTTP without TLS, for local runs (TOPOGANG_INSECURE_HTTP; false)"),
)
BOOL_VALUES = {"true": True, "1": True, "false": False, "0": False}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for flag, metavar, help_text in FLAGS:
        parser.add_argument(flag, metavar=metavar, help=help_text)
    for flag, help_text in BOOL_FLAGS:
        # nargs="?": `--flag` alone is true; `--flag=false` and the older `--flag false` both work
        parser.add_argument(flag, metavar="BOOL", nargs="?", const="true", help=f"{help_text}; {flag} alone means true")


def boolean(name: str, env: str, text: str) -> bool:
    """A boolean flag's or variable's value: true, false, 1 or 0 (any case)."""
    value = BOOL_VALUES.get(text.strip().lower())
    if value is None:
        raise SettingsError(f"{name} ({env}): expected true or false, got {text!r}")
    return value


def settings_from(args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    """Flags win over environment variables, which win over the defaults."""

    def pick(flag: str | None, *env: str) -> str | None:
        return flag if flag is not None else next((environ[e] for e in env if environ.get(e)), None)

    def seconds(name: str, flag: str | None, env: str, default: float) -> float:
        text = pick(flag, env)
        if text is None:
            return default
        try:
            value = float(text.removesuffix("s"))
        except ValueError:
            raise SettingsError(f"{name} ({env}): expected seconds such as 25 or 25s, got {text!r}") from None
        if value <= 0:
            raise SettingsError(f"{name} ({env}): expected a positive number of seconds, got {text!r}")
        return value

    host, port = _address("--listen (TOPOGANG_LISTEN)", pick(args.listen, "TOPOGANG_LISTEN") or "0.0.0.0:8888")
    settings = Settings(
        host=host,
        port=port,
        prefix=pick(args.url_prefix, "TOPOGANG_URL_PREFIX") or "/topogang",
        kubeconfig=pick(args.kubeconfig, "TOPOGANG_KUBECONFIG", "KUBECONFIG"),
        bind_timeout=seconds("--bind-timeout", args.bind_timeout, "TOPOGANG_BIND_TIMEOUT", 25.0),
        bind_call_budget=seconds("--bind-call-budget", args.bind_call_budget, "TOPOGANG_BIND_CALL_BUDGET", 20.0),
        recovery_grace=seconds("--recovery-grace", args.recovery_grace, "TOPOGANG_RECOVERY_GRACE", 30.0),
        plan_ttl=seconds("--plan-ttl", args.plan_ttl, "TOPOGANG_PLAN_TTL", 300.0),
        preemption_timeout=seconds(
            "--preemption-timeout", args.preemption_timeout, "TOPOGANG_PREEMPTION_TIMEOUT", 60.0
        ),
        repair_timeout=seconds("--repair-timeout", args.repair_timeout, "TOPOGANG_REPAIR_TIMEOUT", 300.0),
        log_level=pick(args.log_level, "TOPOGANG_LOG_LEVEL") or "info",
        log_format=pick(args.log_format, "TOPOGANG_LOG_FORMAT") or "auto",
    )
    elect = pick(args.leader_elect, "TOPOGANG_LEADER_ELECT")
    settings = replace(
        settings,
        leader_elect=(
            settings.kubeconfig is None if elect is None else boolean("--leader-elect", "TOPOGANG_LEADER_ELECT", elect)
        ),
        lease_namespace=pick(args.lease_namespace, "TOPOGANG_LEASE_NAMESPACE", "POD_NAMESPACE") or _own_namespace(),
        lease_name=pick(args.lease_name, "TOPOGANG_LEASE_NAME") or "topogang",
        lease_duration=seconds("--lease-duration", args.lease_duration, "TOPOGANG_LEASE_DURATION", 15.0),
        lease_renew_deadline=seconds(
            "--lease-renew-deadline",
            args.lease_renew_deadline,
            "TOPOGANG_LEASE_RENEW_DEADLINE",
            10.0,
        ),
        lease_retry_period=seconds("--lease-retry-period", args.lease_retry_period, "TOPOGANG_LEASE_RETRY_PERIOD", 2.0),
        identity=environ.get("POD_NAME") or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}",
        pod_name=environ.get("POD_NAME") or None,
        pod_namespace=environ.get("POD_NAMESPACE") or None,
    )
    nominate = boolean("--nominate", "TOPOGANG_NOMINATE", pick(args.nominate, "TOPOGANG_NOMINATE") or "true")
    ahead = boolean("--bind-ahead", "TOPOGANG_BIND_AHEAD", pick(args.bind_ahead, "TOPOGANG_BIND_AHEAD") or "true")
    settings = replace(settings, nominate=nominate, bind_ahead=ahead)
    settings = _moves(settings, args, pick, seconds)
    limit, after, largest, level = reservations(args, pick, seconds)
    settings = replace(
        settings, reservations=limit, reserve_after=after, reserve_largest_first=largest, reserve_level=level
    )
    settings = replace(settings, max_wait=max_wait_flag(pick(args.max_wait, "TOPOGANG_MAX_WAIT")))
    settings = replace(settings, estimate_gangs=estimate_gangs(pick(args.estimate_gangs, "TOPOGANG_ESTIMATE_GANGS")))
    per_pass = estimates_per_pass(pick(args.estimates_per_pass, "TOPOGANG_ESTIMATES_PER_PASS"))
    settings = replace(settings, estimates_per_pass=per_pass)
    settings = _transport(settings, args, pick)
    if settings.leader_elect and not (
        settings.lease_duration > settings.lease_renew_deadline > 1.2 * settings.lease_retry_period
    ):
        raise SettingsError(
            "--lease-duration, --lease-renew-deadline, --lease-retry-period: expected "
            "duration > renew deadline > 1.2 x retry period"
        )
    if settings.log_level not in logs.LEVELS:
        raise SettingsError(f"--log-level (TOPOGANG_LOG_LEVEL): expected one of {', '.join(logs.LEVELS)}")
    if settings.log_format not in ("json", "console", "auto"):
        raise SettingsError("--log-format (TOPOGANG_LOG_FORMAT): expected json, console or auto")
    return settings


def _moves(
    settings: Settings,
    args: argparse.Namespace,
    pick: Callable[..., str | None],
    seconds: Callable[[str, str | None, str, float], float],
) -> Settings:
    """--defragment, --move-controllers (booleans), --moves-per-hour (a bounded whole number) and
    --move-cooldown (seconds)."""
    on = boolean("--defragment", "TOPOGANG_DEFRAGMENT", pick(args.defragment, "TOPOGANG_DEFRAGMENT") or "true")
    owners = pick(args.move_controllers, "TOPOGANG_MOVE_CONTROLLERS") or "false"
    controllers = boolean("--move-controllers", "TOPOGANG_MOVE_CONTROLLERS", owners)
    text = pick(args.moves_per_hour, "TOPOGANG_MOVES_PER_HOUR")
    per_hour = whole_number(
        "--moves-per-hour", "TOPOGANG_MOVES_PER_HOUR", text, MAX_MOVES_PER_HOUR, MOVE_DEFAULTS.per_hour
    )
    cooldown = seconds("--move-cooldown", args.move_cooldown, "TOPOGANG_MOVE_COOLDOWN", MOVE_DEFAULTS.cooldown)
    return replace(
        settings, defragment=on, move_controllers=controllers, moves_per_hour=per_hour, move_cooldown=cooldown
    )


def _address(name: str, text: str) -> tuple[str, int]:
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise SettingsError(f"{name}: expected HOST:PORT such as 0.0.0.0:8888, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port_text)


TLS_FLAGS = (
    ("--tls-cert", "TOPOGANG_TLS_CERT"),
    ("--tls-key", "TOPOGANG_TLS_KEY"),
    ("--client-ca", "TOPOGANG_CLIENT_CA"),
)


def _transport(settings: Settings, args: argparse.Namespace, pick: Callable[..., str | None]) -> Settings:
    """mTLS, or plain HTTP when asked for explicitly; the probe listener; the body limit."""
    files = [pick(getattr(args, flag[2:].replace("-", "_")), env) for flag, env in TLS_FLAGS]
    insecure_text = pick(args.insecure_http, "TOPOGANG_INSECURE_HTTP") or "false"
    insecure = boolean("--insecure-http", "TOPOGANG_INSECURE_HTTP", insecure_text)
    given = [f"{flag} ({env})" for (flag, env), path in zip(TLS_FLAGS, files, strict=True) if path]
    if insecure and given:
        raise SettingsError(f"--insecure-http: plain HTTP and {', '.join(given)} exclude each other; choose one")
    if not insecure and len(given) < len(TLS_FLAGS):
        missing = [f"{flag} ({env})" for (flag, env), path in zip(TLS_FLAGS, files, strict=True) if not path]
        raise SettingsError(
            f"{', '.join(missing)}: expected a file; topogang serves mTLS (--tls-cert, --tls-key and "
            "--client-ca together), or plain HTTP only with --insecure-http for a local run"
        )
    cert, key, ca = files
    tls = TlsFiles(cert, key, ca) if cert and key and ca else None
    health_text = pick(args.health_listen, "TOPOGANG_HEALTH_LISTEN")
    health = _address("--health-listen (TOPOGANG_HEALTH_LISTEN)", health_text) if health_text else None
    mib_text = pick(args.max_body, "TOPOGANG_MAX_BODY")
    mib = DEFAULT_MAX_BODY_MIB
    if mib_text is not None:
        if not mib_text.isdigit() or int(mib_text) <= 0:
            raise SettingsError(f"--max-body (TOPOGANG_MAX_BODY): expected a positive number of MiB, got {mib_text!r}")
        mib = int(mib_text)
    return replace(settings, tls=tls, insecure_http=insecure, health=health, max_body=mib * 2**20)


def _own_namespace() -> str:
    """The namespace of the pod's ServiceAccount when running in a cluster, else default."""
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"
