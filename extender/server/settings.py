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
log level / format  --log-level, --log-format  TOPOGANG_LOG_LEVEL, TOPOGANG_LOG_FORMAT

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
"""

from __future__ import annotations

import argparse
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from extender import logs

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class SettingsError(ValueError):
    """A flag or environment variable with a value that cannot be used; names it."""


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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", metavar="HOST:PORT", help="address to serve on (TOPOGANG_LISTEN; 0.0.0.0:8888)")
    parser.add_argument(
        "--url-prefix", metavar="PATH", help="path before /filter etc. (TOPOGANG_URL_PREFIX; /topogang)"
    )
    parser.add_argument(
        "--kubeconfig", metavar="PATH", help="kubeconfig (TOPOGANG_KUBECONFIG, KUBECONFIG; else in-cluster)"
    )
    parser.add_argument(
        "--bind-timeout",
        metavar="SECONDS",
        help="release a gang's plan when no new member reached bind this long (TOPOGANG_BIND_TIMEOUT; 25)",
    )
    parser.add_argument(
        "--bind-call-budget",
        metavar="SECONDS",
        help="longest one bind call waits at the gate; keep it under httpTimeout (TOPOGANG_BIND_CALL_BUDGET; 20)",
    )
    parser.add_argument(
        "--recovery-grace",
        metavar="SECONDS",
        help="a gang part-bound at start gets the bind timeout plus this, else its bound pods are evicted"
        " (TOPOGANG_RECOVERY_GRACE; 30)",
    )
    parser.add_argument("--plan-ttl", metavar="SECONDS", help="release a plan idle this long (TOPOGANG_PLAN_TTL; 300)")
    parser.add_argument("--log-level", metavar="LEVEL", help="debug, info, warning, error (TOPOGANG_LOG_LEVEL; info)")
    parser.add_argument("--log-format", metavar="FORMAT", help="json, console or auto (TOPOGANG_LOG_FORMAT; auto)")
    parser.add_argument(
        "--leader-elect",
        metavar="BOOL",
        help="elect a leader on a Lease (TOPOGANG_LEADER_ELECT; true in-cluster, false with a kubeconfig)",
    )
    parser.add_argument(
        "--lease-namespace", metavar="NS", help="the Lease's namespace (TOPOGANG_LEASE_NAMESPACE; the pod's own)"
    )
    parser.add_argument("--lease-name", metavar="NAME", help="the Lease's name (TOPOGANG_LEASE_NAME; topogang)")
    parser.add_argument("--lease-duration", metavar="SECONDS", help="(TOPOGANG_LEASE_DURATION; 15)")
    parser.add_argument("--lease-renew-deadline", metavar="SECONDS", help="(TOPOGANG_LEASE_RENEW_DEADLINE; 10)")
    parser.add_argument("--lease-retry-period", metavar="SECONDS", help="(TOPOGANG_LEASE_RETRY_PERIOD; 2)")


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

    listen = pick(args.listen, "TOPOGANG_LISTEN") or "0.0.0.0:8888"
    host, sep, port_text = listen.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise SettingsError(f"--listen (TOPOGANG_LISTEN): expected HOST:PORT such as 0.0.0.0:8888, got {listen!r}")
    settings = Settings(
        host=host.strip("[]") or "0.0.0.0",
        port=int(port_text),
        prefix=pick(args.url_prefix, "TOPOGANG_URL_PREFIX") or "/topogang",
        kubeconfig=pick(args.kubeconfig, "TOPOGANG_KUBECONFIG", "KUBECONFIG"),
        bind_timeout=seconds("--bind-timeout", args.bind_timeout, "TOPOGANG_BIND_TIMEOUT", 25.0),
        bind_call_budget=seconds("--bind-call-budget", args.bind_call_budget, "TOPOGANG_BIND_CALL_BUDGET", 20.0),
        recovery_grace=seconds("--recovery-grace", args.recovery_grace, "TOPOGANG_RECOVERY_GRACE", 30.0),
        plan_ttl=seconds("--plan-ttl", args.plan_ttl, "TOPOGANG_PLAN_TTL", 300.0),
        log_level=pick(args.log_level, "TOPOGANG_LOG_LEVEL") or "info",
        log_format=pick(args.log_format, "TOPOGANG_LOG_FORMAT") or "auto",
    )
    elect = pick(args.leader_elect, "TOPOGANG_LEADER_ELECT")
    if elect is not None and elect.lower() not in ("true", "false", "1", "0"):
        raise SettingsError(f"--leader-elect (TOPOGANG_LEADER_ELECT): expected true or false, got {elect!r}")
    settings = replace(
        settings,
        leader_elect=settings.kubeconfig is None if elect is None else elect.lower() in ("true", "1"),
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


def _own_namespace() -> str:
    """The namespace of the pod's ServiceAccount when running in a cluster, else default."""
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"
