"""`topogang serve` settings: leader election and transport (mTLS or explicit plain HTTP):
defaults, flags over environment, bad values."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from extender.core.reservations import Settings as ReservationSettings
from extender.server import serve
from extender.server.settings import Settings, add_arguments, settings_from
from extender.server.settings_error import SettingsError


def parse(*flags: str, **environ: str) -> Settings:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return settings_from(parser.parse_args(list(flags)), environ)


def settings(*flags: str, **environ: str) -> Settings:
    """Leader-election cases, on plain HTTP (the transport has its own tests below)."""
    return parse(*flags, **{"TOPOGANG_INSECURE_HTTP": "true", **environ})


def test_leader_election_is_on_in_cluster_and_off_with_a_kubeconfig() -> None:
    in_cluster = settings(POD_NAME="topogang-7d9f-abcde", POD_NAMESPACE="topogang-system")
    assert (in_cluster.leader_elect, in_cluster.lease_namespace, in_cluster.lease_name) == (
        True,
        "topogang-system",
        "topogang",
    )
    assert in_cluster.identity == "topogang-7d9f-abcde"
    assert (in_cluster.pod_namespace, in_cluster.pod_name) == ("topogang-system", "topogang-7d9f-abcde")
    assert (in_cluster.lease_duration, in_cluster.lease_renew_deadline, in_cluster.lease_retry_period) == (15, 10, 2)
    assert not settings("--kubeconfig", "/tmp/kubeconfig").leader_elect


def test_flags_win_over_the_environment() -> None:
    s = settings(
        "--kubeconfig=/tmp/k",
        "--leader-elect=true",
        "--lease-namespace=ops",
        "--lease-name=tg",
        "--lease-duration=3",
        "--lease-renew-deadline=2s",
        "--lease-retry-period=0.5",
        TOPOGANG_LEADER_ELECT="false",
        TOPOGANG_LEASE_NAMESPACE="other",
    )
    assert (s.leader_elect, s.lease_namespace, s.lease_name) == (True, "ops", "tg")
    assert (s.lease_duration, s.lease_renew_deadline, s.lease_retry_period) == (3, 2, 0.5)
    assert not settings(TOPOGANG_LEADER_ELECT="false").leader_elect


def test_the_reservation_slots_go_in_queue_order_unless_largest_is_asked_for() -> None:
    assert not settings().reserve_largest_first
    assert settings("--reserve-order=largest").reserve_largest_first
    assert settings(TOPOGANG_RESERVE_ORDER="Largest").reserve_largest_first
    assert not settings("--reserve-order=queue", TOPOGANG_RESERVE_ORDER="largest").reserve_largest_first
    # ... and the scheduler the server builds from them gives its reservations that order
    assert serve._scheduler(settings("--reserve-order=largest")).reserving.settings.largest_first
    assert serve._scheduler(settings()).reserving.settings == ReservationSettings()


def test_any_gang_may_hold_room_unless_a_reserve_level_is_named() -> None:
    assert settings().reserve_level is None
    assert settings("--reserve-level=topology.kubernetes.io/zone").reserve_level == "topology.kubernetes.io/zone"
    assert settings(TOPOGANG_RESERVE_LEVEL="block").reserve_level == "block"
    assert serve._scheduler(settings("--reserve-level=zone")).reserving.level == "zone"
    assert serve._scheduler(settings()).reserving.level is None


def test_the_maximum_wait_is_off_unless_asked_for_and_estimates_reach_the_first_hundred() -> None:
    assert settings().max_wait is None
    assert settings("--max-wait=2h").max_wait == 7200.0
    assert settings(TOPOGANG_MAX_WAIT="1h30m").max_wait == 5400.0
    assert settings("--max-wait=off", TOPOGANG_MAX_WAIT="2h").max_wait is None
    assert (settings().estimate_gangs, settings("--estimate-gangs=0").estimate_gangs) == (50, 0)
    reservations = serve._scheduler(settings("--max-wait=30m", "--estimate-gangs=7")).reserving.settings
    assert (reservations.max_wait, reservations.estimates, reservations.estimates_per_pass) == (1800.0, 7, 10)
    spread = serve._scheduler(settings("--estimates-per-pass=3")).reserving.settings
    assert spread.estimates_per_pass == 3
    assert settings(TOPOGANG_ESTIMATES_PER_PASS="0").estimates_per_pass == 0  # the whole walk every pass


def test_without_pod_name_the_identity_is_unique_per_process() -> None:
    assert settings().identity != settings().identity


def test_without_both_pod_variables_there_is_no_pod_to_label() -> None:
    assert (settings().pod_namespace, settings().pod_name) == (None, None)
    assert settings(POD_NAME="a").pod_namespace is None
    assert settings(POD_NAMESPACE="ns").pod_name is None


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--leader-elect=maybe"], "--leader-elect (TOPOGANG_LEADER_ELECT): expected true or false, got 'maybe'"),
        (["--lease-duration=5", "--lease-renew-deadline=5"], "expected duration > renew deadline > 1.2 x retry period"),
        (["--lease-retry-period=0"], "--lease-retry-period (TOPOGANG_LEASE_RETRY_PERIOD): expected a positive"),
        (["--reserve-order=biggest"], "--reserve-order (TOPOGANG_RESERVE_ORDER): expected queue or largest, got"),
        (["--reserve-level=zone one"], "--reserve-level (TOPOGANG_RESERVE_LEVEL): expected a topology level's node"),
        (["--reserve-level="], "--reserve-level (TOPOGANG_RESERVE_LEVEL): expected a topology level's node label"),
        (["--max-wait=3600"], "--max-wait (TOPOGANG_MAX_WAIT): expected off or a positive duration with units, such"),
        (["--max-wait=0s"], "--max-wait (TOPOGANG_MAX_WAIT): expected off or a positive duration with units"),
        (["--estimate-gangs=-1"], "--estimate-gangs (TOPOGANG_ESTIMATE_GANGS): expected a whole number from 0 to 1000"),
        (["--estimate-gangs=5000"], "--estimate-gangs (TOPOGANG_ESTIMATE_GANGS): expected a whole number from 0"),
        (["--estimates-per-pass=ten"], "--estimates-per-pass (TOPOGANG_ESTIMATES_PER_PASS): expected a whole number"),
    ],
    ids=[
        "not-a-bool",
        "deadline-not-under-duration",
        "zero-retry",
        "unknown-reserve-order",
        "level-space",
        "level-empty",
        "max-wait-without-unit",
        "max-wait-zero",
        "estimates-negative",
        "estimates-beyond-the-bound",
        "estimates-per-pass-not-a-number",
    ],
)
def test_bad_values_are_refused_naming_the_flag(flags: list[str], message: str) -> None:
    with pytest.raises(SettingsError) as exc:
        settings(*flags)
    assert message in str(exc.value)


TLS = ("--tls-cert=/tls/tls.crt", "--tls-key=/tls/tls.key", "--client-ca=/tls/ca.crt")


def test_mtls_needs_all_three_files_and_plain_http_must_be_asked_for() -> None:
    with pytest.raises(SettingsError) as exc:
        parse()
    assert "--tls-cert (TOPOGANG_TLS_CERT), --tls-key (TOPOGANG_TLS_KEY), --client-ca (TOPOGANG_CLIENT_CA)" in str(
        exc.value
    )
    assert "--insecure-http" in str(exc.value)
    with pytest.raises(SettingsError, match=r"^--client-ca \(TOPOGANG_CLIENT_CA\): expected a file"):
        parse(*TLS[:2])
    s = parse(*TLS)
    assert s.tls is not None
    assert (s.tls.cert, s.tls.key, s.tls.client_ca) == ("/tls/tls.crt", "/tls/tls.key", "/tls/ca.crt")
    assert not s.insecure_http
    env = parse(TOPOGANG_TLS_CERT="c", TOPOGANG_TLS_KEY="k", TOPOGANG_CLIENT_CA="ca")
    assert env.tls is not None
    assert env.tls.client_ca == "ca"
    plain = parse("--insecure-http")
    assert (plain.tls, plain.insecure_http) == (None, True)
    assert parse(TOPOGANG_INSECURE_HTTP="true").insecure_http


def test_plain_http_and_tls_exclude_each_other() -> None:
    with pytest.raises(SettingsError, match="--insecure-http: plain HTTP and --tls-cert"):
        parse("--insecure-http", *TLS)
    with pytest.raises(SettingsError, match=r"--insecure-http .*expected true or false"):
        parse("--insecure-http=perhaps")


def test_probe_listener_and_body_limit() -> None:
    s = parse(*TLS, "--health-listen=0.0.0.0:8889", "--max-body=200")
    assert (s.health, s.max_body) == (("0.0.0.0", 8889), 200 * 2**20)
    assert parse(*TLS).health is None
    assert parse(*TLS).max_body == 32 * 2**20
    with pytest.raises(SettingsError, match=r"--health-listen \(TOPOGANG_HEALTH_LISTEN\): expected HOST:PORT"):
        parse(*TLS, "--health-listen=8889")
    with pytest.raises(SettingsError, match=r"--max-body \(TOPOGANG_MAX_BODY\): expected a positive number"):
        parse(*TLS, TOPOGANG_MAX_BODY="1.5")


def test_serve_help_names_every_flags_environment_variable() -> None:
    """`topogang serve --help` names each flag's variable (leader election and TLS included), and
    the flag table of docs/cli.md lists each flag with its variable."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    flags = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    assert len(flags) >= 19  # every flag, however many there are, is checked below
    table = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    for action in flags:
        env = re.search(r"TOPOGANG_[A-Z_]+", action.help or "")
        assert env is not None, f"{action.option_strings[0]}: no environment variable in its help"
        assert f"`{action.option_strings[0]}`" in table, action.option_strings[0]
        assert f"`{env.group(0)}`" in table, env.group(0)


BOOLEANS = [
    ("--nominate", "nominate", "TOPOGANG_NOMINATE"),
    ("--bind-ahead", "bind_ahead", "TOPOGANG_BIND_AHEAD"),
    ("--leader-elect", "leader_elect", "TOPOGANG_LEADER_ELECT"),
    ("--insecure-http", "insecure_http", "TOPOGANG_INSECURE_HTTP"),
]


@pytest.mark.parametrize(("flag", "field", "env"), BOOLEANS, ids=[b[0] for b in BOOLEANS])
def test_every_boolean_flag_takes_its_value_alike(flag: str, field: str, env: str) -> None:
    def value(*flags: str, want: bool, **environ: str) -> bool:
        # plain HTTP for the others; for --insecure-http itself, TLS files when it is to be false
        transport = [] if flag == "--insecure-http" else ["--insecure-http"]
        if flag == "--insecure-http" and not want:
            transport = list(TLS)
        return bool(getattr(parse(*transport, *flags, **environ), field))

    forms: list[tuple[list[str], dict[str, str], bool]] = [
        ([flag], {}, True),  # alone: true
        ([f"{flag}=true"], {}, True),
        ([f"{flag}=false"], {}, False),
        ([f"{flag}=TRUE"], {}, True),
        ([f"{flag}=0"], {}, False),
        ([flag, "false"], {}, False),  # the older spelling still works
        ([], {env: "false"}, False),
        ([], {env: "1"}, True),
        ([flag], {env: "false"}, True),  # a flag wins over its variable
    ]
    for flags, environ, want in forms:
        assert value(*flags, want=want, **environ) is want, (flags, environ)
    with pytest.raises(SettingsError, match=rf"^{flag} \({env}\): expected true or false, got 'maybe'$"):
        parse("--insecure-http" if flag != "--insecure-http" else "--nominate", f"{flag}=maybe")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert f"[{flag} [BOOL]]" in parser.format_usage()
