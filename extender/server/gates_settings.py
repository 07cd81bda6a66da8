"""Settings of the scheduling mode and the admission webhook of `topogang serve` (flags win over
environment variables, which win over the defaults).

mode                --mode            TOPOGANG_MODE           extender (kube-scheduler calls topogang)
                                                              or gates (the stock kube-scheduler;
                                                              topogang gates and ungates gang pods)
webhook address     --webhook-listen  TOPOGANG_WEBHOOK_LISTEN  HOST:PORT of the HTTPS webhook;
                                                              0.0.0.0:9443 in gates mode; in
                                                              extender mode off unless set (then it
                                                              only adds segment env vars)
serving cert        --webhook-cert, --webhook-key  TOPOGANG_WEBHOOK_CERT, TOPOGANG_WEBHOOK_KEY
                                                              PEM files (cert-manager's Secret);
                                                              re-read when they change. Unset:
                                                              topogang makes its own CA and cert
self-signed only    --webhook-config  TOPOGANG_WEBHOOK_CONFIG  topogang: the
                                                              MutatingWebhookConfiguration whose
                                                              caBundle the leader sets
                    --webhook-hosts   TOPOGANG_WEBHOOK_HOSTS  the certificate's names, comma-separated
                                                              DNS names or IPs (default
                                                              topogang-webhook.<POD_NAMESPACE>.svc)
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass

from extender.server.settings_error import SettingsError

MODES = ("extender", "gates")
DEFAULT_WEBHOOK_PORT = 9443


@dataclass(frozen=True)
class GatesSettings:
    mode: str = "extender"
    webhook_host: str | None = None  # None: no webhook
    webhook_port: int = DEFAULT_WEBHOOK_PORT
    cert_file: str | None = None  # None (with key_file): self-signed
    key_file: str | None = None
    webhook_config: str = "topogang"
    hosts: tuple[str, ...] = ()

    @property
    def webhook(self) -> bool:
        return self.webhook_host is not None

    @property
    def self_signed(self) -> bool:
        return self.cert_file is None


def add_gates_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", metavar="MODE", help="extender or gates (TOPOGANG_MODE; extender)")
    parser.add_argument(
        "--webhook-listen",
        metavar="HOST:PORT",
        help="serve the admission webhook over HTTPS (TOPOGANG_WEBHOOK_LISTEN; 0.0.0.0:9443 in gates mode, else off)",
    )
    parser.add_argument("--webhook-cert", metavar="PATH", help="serving certificate, PEM (TOPOGANG_WEBHOOK_CERT)")
    parser.add_argument("--webhook-key", metavar="PATH", help="its private key, PEM (TOPOGANG_WEBHOOK_KEY)")
    parser.add_argument(
        "--webhook-config",
        metavar="NAME",
        help="MutatingWebhookConfiguration whose caBundle a self-signed start sets (TOPOGANG_WEBHOOK_CONFIG; topogang)",
    )
    parser.add_argument(
        "--webhook-hosts",
        metavar="NAMES",
        help="DNS names and IPs of a self-signed certificate, comma-separated (TOPOGANG_WEBHOOK_HOSTS)",
    )


def gates_settings_from(args: argparse.Namespace, environ: Mapping[str, str]) -> GatesSettings:
    def pick(flag: str | None, env: str) -> str | None:
        return flag if flag is not None else (environ.get(env) or None)

    mode = pick(args.mode, "TOPOGANG_MODE") or "extender"
    if mode not in MODES:
        raise SettingsError(f"--mode (TOPOGANG_MODE): expected extender or gates, got {mode!r}")
    listen = pick(args.webhook_listen, "TOPOGANG_WEBHOOK_LISTEN")
    if listen is None and mode == "gates":
        listen = f"0.0.0.0:{DEFAULT_WEBHOOK_PORT}"
    host, port = None, DEFAULT_WEBHOOK_PORT
    if listen is not None:
        text, sep, port_text = listen.rpartition(":")
        if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise SettingsError(
                f"--webhook-listen (TOPOGANG_WEBHOOK_LISTEN): expected HOST:PORT such as 0.0.0.0:9443, got {listen!r}"
            )
        host, port = text.strip("[]") or "0.0.0.0", int(port_text)
    cert = pick(args.webhook_cert, "TOPOGANG_WEBHOOK_CERT")
    key = pick(args.webhook_key, "TOPOGANG_WEBHOOK_KEY")
    if (cert is None) != (key is None):
        raise SettingsError("--webhook-cert, --webhook-key (TOPOGANG_WEBHOOK_CERT, _KEY): expected both or neither")
    hosts_text = pick(args.webhook_hosts, "TOPOGANG_WEBHOOK_HOSTS")
    namespace = environ.get("POD_NAMESPACE") or "topogang-system"
    hosts = tuple(h.strip() for h in (hosts_text or f"topogang-webhook.{namespace}.svc").split(",") if h.strip())
    if not hosts:
        raise SettingsError("--webhook-hosts (TOPOGANG_WEBHOOK_HOSTS): expected at least one DNS name or IP")
    return GatesSettings(
        mode=mode,
        webhook_host=host,
        webhook_port=port,
        cert_file=cert,
        key_file=key,
        webhook_config=pick(args.webhook_config, "TOPOGANG_WEBHOOK_CONFIG") or "topogang",
        hosts=hosts,
    )
