"""Settings of `topogang serve`, from flags and environment variables (flags win).

listen address      --listen          TOPOGANG_LISTEN         0.0.0.0:8888
URL prefix          --url-prefix      TOPOGANG_URL_PREFIX     /topogang
cluster access      --kubeconfig      TOPOGANG_KUBECONFIG, KUBECONFIG (else in-cluster)
bind gate timeout   --bind-timeout    TOPOGANG_BIND_TIMEOUT   25 (seconds; keep it under the
                                                              extender httpTimeout, 30s in
                                                              scheduler-config/)
plan lifetime       --plan-ttl        TOPOGANG_PLAN_TTL       300 (seconds without progress)
log level / format  --log-level, --log-format  TOPOGANG_LOG_LEVEL, TOPOGANG_LOG_FORMAT
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass

from extender import logs


class SettingsError(ValueError):
    """A flag or environment variable with a value that cannot be used; names it."""


@dataclass(frozen=True)
class Settings:
    host: str = "0.0.0.0"
    port: int = 8888
    prefix: str = "/topogang"
    kubeconfig: str | None = None  # None: in-cluster
    bind_timeout: float = 25.0
    plan_ttl: float = 300.0
    log_level: str = "info"
    log_format: str = "auto"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", metavar="HOST:PORT", help="address to serve on (TOPOGANG_LISTEN; 0.0.0.0:8888)")
    parser.add_argument(
        "--url-prefix", metavar="PATH", help="path before /filter etc. (TOPOGANG_URL_PREFIX; /topogang)"
    )
    parser.add_argument(
        "--kubeconfig", metavar="PATH", help="kubeconfig (TOPOGANG_KUBECONFIG, KUBECONFIG; else in-cluster)"
    )
    parser.add_argument(
        "--bind-timeout", metavar="SECONDS", help="longest a bind waits for its gang (TOPOGANG_BIND_TIMEOUT; 25)"
    )
    parser.add_argument("--plan-ttl", metavar="SECONDS", help="release a plan idle this long (TOPOGANG_PLAN_TTL; 300)")
    parser.add_argument("--log-level", metavar="LEVEL", help="debug, info, warning, error (TOPOGANG_LOG_LEVEL; info)")
    parser.add_argument("--log-format", metavar="FORMAT", help="json, console or auto (TOPOGANG_LOG_FORMAT; auto)")


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
        plan_ttl=seconds("--plan-ttl", args.plan_ttl, "TOPOGANG_PLAN_TTL", 300.0),
        log_level=pick(args.log_level, "TOPOGANG_LOG_LEVEL") or "info",
        log_format=pick(args.log_format, "TOPOGANG_LOG_FORMAT") or "auto",
    )
    if settings.log_level not in logs.LEVELS:
        raise SettingsError(f"--log-level (TOPOGANG_LOG_LEVEL): expected one of {', '.join(logs.LEVELS)}")
    if settings.log_format not in ("json", "console", "auto"):
        raise SettingsError("--log-format (TOPOGANG_LOG_FORMAT): expected json, console or auto")
    return settings
