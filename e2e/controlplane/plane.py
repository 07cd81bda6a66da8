"""A real Kubernetes control plane on loopback, from the binaries build.sh made: etcd,
kube-apiserver, kube-controller-manager, kwok and (optionally, restartable) kube-scheduler.

    with ControlPlane() as plane:          # stock kube-scheduler
        print(plane.kubeconfig)
        plane.restart_scheduler({"extenders": [...]})   # same plane, another scheduler config

    # Feature gates or API groups off by default: extra flags per component, and per scheduler
    # start (a scheduler with gates next to one without, on the same plane).
    ControlPlane(extra_args={"kube-apiserver": ["--runtime-config=scheduling.k8s.io/v1beta1=true"]})
    plane.restart_scheduler(config, args=["--feature-gates=GenericWorkload=true"])

Everything lives in one working directory (a new temporary one unless given): certificates,
kubeconfigs, etcd's data and one log per component under logs/. `stop()` removes it unless asked
to keep it; `__exit__` keeps it when the block raised, and says where it is.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import functools
import json
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from .binaries import Binaries
from .pki import ClientIdentity, Pki, make_pki
from .process import Component, ComponentError, Probe

# A KubeSchedulerConfiguration: a YAML file, or the document as a dict.
SchedulerConfig = Path | str | Mapping[str, Any]

SCHEDULER_CONFIG_API = "kubescheduler.config.k8s.io/v1"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
KUBERNETES_SERVICE_IP = "10.0.0.1"
FAKE_POD_CIDR = "10.244.0.0/16"  # kwok hands out pod IPs from here
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_ANNOTATION_VALUE = "fake"
CONTEXT_NAME = "topogang-local"

# The client certificate each component authenticates with. kube-scheduler uses the user RBAC's
# bootstrap policy has a role for. kwok fakes kubelets and gets admin. kube-controller-manager
# also gets admin and runs every controller under that one identity
# (--use-service-account-credentials=false): setting up a ServiceAccount per controller adds
# about 5 s to every start, and a test plane gains nothing from it.
IDENTITIES = {
    "admin": ClientIdentity("topogang-admin", ("system:masters",)),
    "kube-controller-manager": ClientIdentity("system:kube-controller-manager", ("system:masters",)),
    "kube-scheduler": ClientIdentity("system:kube-scheduler"),
    "kwok": ClientIdentity("kwok", ("system:masters",)),
}
PORT_ATTEMPTS = 3


def free_ports(count: int) -> list[int]:
    """COUNT distinct free TCP ports on 127.0.0.1 (held together while picking, so distinct)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _http_probe(url: str, context: ssl.SSLContext | None, accept: Callable[[bytes], bool] | None = None) -> Probe:
    def probe() -> str | None:
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as resp:
                body: bytes = resp.read()
        except urllib.error.HTTPError as e:
            return f"HTTP {e.code} from {url}: {e.read()[:300].decode(errors='replace')}"
        except (OSError, ssl.SSLError) as e:
            return f"{url}: {e}"
        if accept is not None and not accept(body):
            return f"{url} answered {body[:200]!r}"
        return None

    return probe


def _insecure_context() -> ssl.SSLContext:
    # kube-controller-manager and kube-scheduler serve /healthz with a certificate they make up
    # in memory; there is nothing to verify it against.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class ControlPlane:
    """etcd, kube-apiserver, kube-controller-manager, kwok and optionally kube-scheduler.

    `scheduler`: True starts the stock kube-scheduler, False none (start one later with
    `start_scheduler`), or a KubeSchedulerConfiguration (path or dict) to start it with.
    `extra_args`: more command-line flags per component name (e.g. "kube-apiserver"), appended
    to the launcher's own.
    """

    def __init__(
        self,
        *,
        workdir: Path | str | None = None,
        binaries: Binaries | None = None,
        scheduler: bool | SchedulerConfig = True,
        timeout: float = 60.0,
        scheduler_verbosity: int = 2,
        log: Callable[[str], None] | None = None,
        extra_args: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.extra_args = {name: list(args) for name, args in (extra_args or {}).items()}
        self.binaries = binaries or Binaries.locate()
        self._given_workdir = Path(workdir).resolve() if workdir is not None else None
        self._scheduler_at_start = scheduler
        self.timeout = timeout
        self.scheduler_verbosity = scheduler_verbosity
        self._log = log or (lambda _msg: None)
        self._workdir: Path | None = None
        self._pki: Pki | None = None
        self.components: dict[str, Component] = {}
        self.ports: dict[str, int] = {}
        self.startup_seconds: dict[str, float] = {}
        self._scheduler_starts = 0
        self._scheduler_config_path: Path | None = None
        self._stopped = False

    # ------------------------------------------------------------------ paths and facts
    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            raise RuntimeError("the control plane has not been started")
        return self._workdir

    @property
    def logs_dir(self) -> Path:
        return self.workdir / "logs"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (user in system:masters), with the CA and key embedded."""
        return self.workdir / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['kube-apiserver']}"

    @property
    def kubectl(self) -> Path:
        return self.binaries.path("kubectl")

    @property
    def scheduler_config_path(self) -> Path | None:
        """The KubeSchedulerConfiguration file the running kube-scheduler was given."""
        return self._scheduler_config_path

    @property
    def pki(self) -> Pki:
        """The certificates: the CA, the API server's serving pair, each identity's client pair."""
        if self._pki is None:
            raise RuntimeError("the control plane has not been started")
        return self._pki

    def kubeconfig_for(self, identity: str) -> Path:
        return self.workdir / "kubeconfigs" / f"{identity}.kubeconfig"

    def describe(self) -> str:
        lines = [f"workdir {self.workdir}", f"server {self.server}"]
        for name, c in self.components.items():
            state = "running" if c.running() else f"exited {c.returncode()}"
            lines.append(f"{name:<24} pid {c.pid} {state}; log {c.log_path}")
        return "\n".join(lines)

    # ------------------------------------------------------------------ whole plane
    def start(self) -> ControlPlane:
        """Starts every component and waits until each is healthy. On any failure stops what it
        started (keeping the working directory) and re-raises."""
        if self._workdir is not None:
            raise RuntimeError("the control plane is already started")
        began = time.monotonic()
        if self._given_workdir is not None:
            self._given_workdir.mkdir(parents=True, exist_ok=True)
            self._workdir = self._given_workdir
        else:
            self._workdir = Path(tempfile.mkdtemp(prefix="topogang-controlplane-"))
        try:
            t = time.monotonic()
            self._prepare()
            self.startup_seconds["certificates"] = time.monotonic() - t
            self._start_with_port_retries("etcd", self._spawn_etcd)
            self._start_with_port_retries("kube-apiserver", self._spawn_apiserver)
            # The rest only needs the API server: start them together, then wait for each.
            spawners: list[tuple[str, Callable[[], Component]]] = [
                ("kube-controller-manager", self._spawn_controller_manager),
                ("kwok", self._spawn_kwok),
            ]
            if self._scheduler_at_start is not False:
                config = None if self._scheduler_at_start is True else self._scheduler_at_start
                spawners.append(("kube-scheduler", functools.partial(self._spawn_scheduler, config, ())))
            spawned = [(name, spawn, spawn()) for name, spawn in spawners]
            for name, spawn, component in spawned:
                self._wait_with_port_retries(name, spawn, component)
            t = time.monotonic()
            self._wait_for_default_service_account()
            self.startup_seconds["default-serviceaccount"] = time.monotonic() - t
        except BaseException:
            self.stop(keep_workdir=True)
            raise
        self.startup_seconds["total"] = time.monotonic() - began
        self._log(f"control plane up in {self.startup_seconds['total']:.1f}s ({self.workdir})")
        return self

    def stop(self, *, keep_workdir: bool | None = None) -> None:
        """Stops every component (scheduler first, etcd last). Removes the working directory
        unless KEEP_WORKDIR, or (when None) unless it was given to the constructor."""
        if self._stopped:
            return
        errors: list[BaseException] = []
        for name in reversed(list(self.components)):
            try:
                self.components[name].stop()
            except BaseException as e:  # keep stopping the others
                errors.append(e)
        if self._workdir is None:
            return
        self._stopped = True
        keep = keep_workdir if keep_workdir is not None else self._given_workdir is not None
        if keep:
            self._log(f"control plane stopped; its files and logs are kept in {self._workdir}")
        else:
            shutil.rmtree(self._workdir, ignore_errors=True)
        if errors:
            raise errors[0]

    def check(self) -> None:
        """Raises ComponentError naming the first component that has died."""
        for component in self.components.values():
            component.check_alive()

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        keep = True if exc_type is not None else None
        self.stop(keep_workdir=keep)
        if exc_type is not None and self._workdir is not None:
            print(f"control plane logs kept in {self._workdir / 'logs'}", file=sys.stderr)

    # ------------------------------------------------------------------ restarts
    def restart(self, name: str, *, down: float = 0.0) -> float:
        """Stops component NAME (e.g. "kube-apiserver", "etcd") and starts it again with the same
        flags, ports and data (etcd keeps its data directory), after DOWN seconds; waits until
        it is healthy and returns the seconds it was down. The other components are left alone:
        they see what clients see when it restarts (connections refused, watches ended)."""
        component = self.components[name]
        began = time.monotonic()
        component.stop()
        if down:
            time.sleep(down)
        component.start()
        component.wait_healthy(self.timeout)
        self._log(f"{name} restarted")
        return time.monotonic() - began

    async def restart_async(self, name: str, *, down: float = 0.0) -> float:
        """restart for async tests: the event loop keeps running meanwhile."""
        return await asyncio.to_thread(self.restart, name, down=down)

    # ------------------------------------------------------------------ kube-scheduler
    def start_scheduler(self, config: SchedulerConfig | None = None, args: Sequence[str] = ()) -> Component:
        """Starts kube-scheduler with CONFIG (None: the stock configuration) and waits until it
        is healthy. The launcher sets clientConnection.kubeconfig and turns leader election off;
        everything else (profiles, extenders, ...) is used as given. ARGS: more flags for this
        start only (after extra_args["kube-scheduler"])."""
        if "kube-scheduler" in self.components and self.components["kube-scheduler"].running():
            raise RuntimeError("kube-scheduler is already running; use restart_scheduler")
        spawn = functools.partial(self._spawn_scheduler, config, args)
        return self._wait_with_port_retries("kube-scheduler", spawn, spawn())

    def stop_scheduler(self) -> None:
        scheduler = self.components.get("kube-scheduler")
        if scheduler is not None:
            scheduler.stop()

    def restart_scheduler(self, config: SchedulerConfig | None = None, args: Sequence[str] = ()) -> Component:
        self.stop_scheduler()
        return self.start_scheduler(config, args)

    async def start_scheduler_async(self, config: SchedulerConfig | None = None, args: Sequence[str] = ()) -> Component:
        """start_scheduler for async tests: the event loop (and, say, an extender server running
        in it) keeps running while kube-scheduler comes up."""
        if "kube-scheduler" in self.components and self.components["kube-scheduler"].running():
            raise RuntimeError("kube-scheduler is already running; use restart_scheduler_async")
        for attempt in range(1, PORT_ATTEMPTS + 1):
            component = self._spawn_scheduler(config, args)
            try:
                seconds = await component.wait_healthy_async(self.timeout)
            except ComponentError as e:
                component.stop()
                if e.address_in_use and attempt < PORT_ATTEMPTS:
                    continue
                raise
            self.startup_seconds["kube-scheduler"] = seconds
            return component
        raise AssertionError("unreachable")

    async def stop_scheduler_async(self) -> None:
        await asyncio.to_thread(self.stop_scheduler)

    async def restart_scheduler_async(
        self, config: SchedulerConfig | None = None, args: Sequence[str] = ()
    ) -> Component:
        await self.stop_scheduler_async()
        return await self.start_scheduler_async(config, args)

    def scheduler_config_document(self, config: SchedulerConfig | None) -> dict[str, Any]:
        """The KubeSchedulerConfiguration the launcher would run for CONFIG."""
        if config is None:
            doc: dict[str, Any] = {}
        elif isinstance(config, Mapping):
            doc = copy.deepcopy(dict(config))
        else:
            loaded = yaml.safe_load(Path(config).read_text())
            if not isinstance(loaded, dict):
                raise ValueError(f"{config} is not a KubeSchedulerConfiguration document")
            doc = loaded
        doc.setdefault("apiVersion", SCHEDULER_CONFIG_API)
        doc.setdefault("kind", "KubeSchedulerConfiguration")
        client = dict(doc.get("clientConnection") or {})
        client["kubeconfig"] = str(self.kubeconfig_for("kube-scheduler"))
        doc["clientConnection"] = client
        election = dict(doc.get("leaderElection") or {})
        election["leaderElect"] = False
        doc["leaderElection"] = election
        return doc

    # ------------------------------------------------------------------ helpers for callers
    def run_kubectl(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Runs the built kubectl against this plane; raises CalledProcessError on failure."""
        return subprocess.run(
            [str(self.kubectl), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )

    def component_get(self, name: str, path: str) -> bytes:
        """GET PATH (e.g. /metrics) from kube-scheduler or kube-controller-manager's own secure
        port, as admin; their serving certificate is made up in memory, so it is not verified."""
        context = _insecure_context()
        assert self._pki is not None
        admin = self._pki.clients["admin"]
        context.load_cert_chain(str(admin.cert), str(admin.key))
        url = f"https://127.0.0.1:{self.ports[name]}{path}"
        # No retry: both components read the client CA from --client-ca-file before they serve
        # (see _delegated_authn), so admin's certificate is accepted from their first request.
        with urllib.request.urlopen(url, timeout=30, context=context) as resp:
            body: bytes = resp.read()
        return body

    def api_get(self, path: str) -> Any:
        """GET PATH on the API server as admin; the decoded JSON."""
        return json.loads(self.api_get_bytes(path))

    def api_get_bytes(self, path: str) -> bytes:
        """GET PATH on the API server as admin (e.g. /metrics); the raw body."""
        with urllib.request.urlopen(self.server + path, timeout=30, context=self._admin_context()) as resp:
            body: bytes = resp.read()
        return body

    # ------------------------------------------------------------------ internals
    def _admin_context(self) -> ssl.SSLContext:
        assert self._pki is not None
        context = ssl.create_default_context(cafile=str(self._pki.ca.cert))
        admin = self._pki.clients["admin"]
        context.load_cert_chain(str(admin.cert), str(admin.key))
        return context

    def _prepare(self) -> None:
        for sub in ("pki", "logs", "kubeconfigs", "etcd", "kube-controller-manager", "kwok"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        self._pki = make_pki(
            self.workdir / "pki",
            IDENTITIES,
            serving_ips=("127.0.0.1", KUBERNETES_SERVICE_IP),
        )
        # The API server's port is fixed before the kubeconfigs are written; when it has to be
        # picked again (port taken meanwhile), they are rewritten.
        self.ports["kube-apiserver"] = free_ports(1)[0]
        self._write_kubeconfigs()

    def _write_kubeconfigs(self) -> None:
        assert self._pki is not None
        for identity in IDENTITIES:
            path = self.kubeconfig_for(identity)
            self._write_kubeconfig(path, identity)
        self._write_kubeconfig(self.kubeconfig, "admin")

    def _write_kubeconfig(self, path: Path, identity: str) -> None:
        assert self._pki is not None
        client = self._pki.clients[identity]
        user = IDENTITIES[identity].user
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": CONTEXT_NAME,
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": _b64(self._pki.ca.cert),
                    },
                }
            ],
            "users": [
                {
                    "name": user,
                    "user": {
                        "client-certificate-data": _b64(client.cert),
                        "client-key-data": _b64(client.key),
                    },
                }
            ],
            "contexts": [{"name": CONTEXT_NAME, "context": {"cluster": CONTEXT_NAME, "user": user}}],
            "current-context": CONTEXT_NAME,
        }
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        path.chmod(0o600)

    def _start_with_port_retries(self, name: str, spawn: Callable[[], Component]) -> Component:
        return self._wait_with_port_retries(name, spawn, spawn())

    def _wait_with_port_retries(self, name: str, spawn: Callable[[], Component], component: Component) -> Component:
        # A port picked free can be taken by someone else before the component binds it; then
        # the component exits with "address already in use" and is started on new ports.
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                self.startup_seconds[name] = component.wait_healthy(self.timeout)
                self._log(f"{name} healthy after {self.startup_seconds[name]:.1f}s")
                return component
            except ComponentError as e:
                component.stop()
                if not e.address_in_use or attempt == PORT_ATTEMPTS:
                    raise
                self._log(f"{name}: port taken, starting it again on another port")
                component = spawn()
        raise AssertionError("unreachable")

    def _component(self, name: str, argv: list[str], probe: Probe, log_name: str = "") -> Component:
        if name != "kube-scheduler":  # its flags are assembled per start
            argv = [*argv, *self.extra_args.get(name, ())]
        component = Component(
            name,
            argv,
            self.logs_dir / f"{log_name or name}.log",
            probe=probe,
            cwd=self.workdir,
        )
        self.components[name] = component
        component.start()
        return component

    def _spawn_etcd(self) -> Component:
        client, peer = free_ports(2)
        self.ports["etcd"], self.ports["etcd-peer"] = client, peer
        data_dir = self.workdir / "etcd" / "data"
        if data_dir.exists():  # a failed attempt; start clean
            shutil.rmtree(data_dir)
        argv = [
            str(self.binaries.path("etcd")),
            "--name=topogang",
            f"--data-dir={data_dir}",
            f"--listen-client-urls=http://127.0.0.1:{client}",
            f"--advertise-client-urls=http://127.0.0.1:{client}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=topogang=http://127.0.0.1:{peer}",
            "--initial-cluster-state=new",
            # Throw-away data: skip fsync, keep the database small.
            "--unsafe-no-fsync=true",
            "--quota-backend-bytes=2147483648",
            "--log-level=warn",
        ]
        probe = _http_probe(
            f"http://127.0.0.1:{client}/health",
            None,
            lambda body: json.loads(body).get("health") == "true",
        )
        return self._component("etcd", argv, probe)

    def _spawn_apiserver(self) -> Component:
        assert self._pki is not None
        if "kube-apiserver" in self.components:  # a retry after a port clash
            self.ports["kube-apiserver"] = free_ports(1)[0]
            self._write_kubeconfigs()
        port = self.ports["kube-apiserver"]
        pki = self._pki
        argv = [
            str(self.binaries.path("kube-apiserver")),
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            f"--tls-cert-file={pki.serving.cert}",
            f"--tls-private-key-file={pki.serving.key}",
            f"--client-ca-file={pki.ca.cert}",
            # Nothing uses the front proxy; configured so kube-scheduler and
            # kube-controller-manager find the request-header CA they look up at start.
            f"--requestheader-client-ca-file={pki.ca.cert}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            "--authorization-mode=RBAC",
            "--anonymous-auth=false",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki.service_account_public_key}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            # Loopback cannot be an endpoint of the `kubernetes` Service; nothing in this
            # cluster runs real pods that would use it.
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            "--profiling=false",
        ]
        probe = _http_probe(f"https://127.0.0.1:{port}/readyz", self._admin_context(), lambda b: b == b"ok")
        return self._component("kube-apiserver", argv, probe)

    def _delegated_authn(self, kubeconfig: Path) -> list[str]:
        """Flags for a component that delegates authentication and authorization to the API
        server. The client CA is named as a file because the default, the
        extension-apiserver-authentication ConfigMap, is loaded by a controller after the secure
        port already serves: a request in that window (component_get just after a start) was
        refused with 401 or, as anonymous, 403 (a flake of make test)."""
        assert self._pki is not None
        return [
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--client-ca-file={self._pki.ca.cert}",
        ]

    def _spawn_controller_manager(self) -> Component:
        assert self._pki is not None
        port = free_ports(1)[0]
        self.ports["kube-controller-manager"] = port
        kubeconfig = self.kubeconfig_for("kube-controller-manager")
        argv = [
            str(self.binaries.path("kube-controller-manager")),
            f"--kubeconfig={kubeconfig}",
            *self._delegated_authn(kubeconfig),
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.workdir / 'kube-controller-manager'}",
            "--leader-elect=false",
            "--use-service-account-credentials=false",
            f"--service-account-private-key-file={self._pki.service_account_key}",
            f"--root-ca-file={self._pki.ca.cert}",
            f"--cluster-signing-cert-file={self._pki.ca.cert}",
            f"--cluster-signing-key-file={self._pki.ca.key}",
        ]
        probe = _http_probe(f"https://127.0.0.1:{port}/healthz", _insecure_context(), lambda b: b == b"ok")
        return self._component("kube-controller-manager", argv, probe)

    def _spawn_kwok(self) -> Component:
        port = free_ports(1)[0]
        self.ports["kwok"] = port
        # All Stage configs in one multi-document file.
        stages = self.workdir / "kwok" / "stages.yaml"
        stages.write_text("\n---\n".join(p.read_text().strip() for p in self.binaries.stages()) + "\n")
        argv = [
            str(self.binaries.path("kwok")),
            f"--kubeconfig={self.kubeconfig_for('kwok')}",
            f"--config={stages}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}",
            f"--server-address=127.0.0.1:{port}",
            # Fake kubelets renew node leases, so the node lifecycle controller keeps them Ready.
            "--node-lease-duration-seconds=40",
            f"--cidr={FAKE_POD_CIDR}",
        ]
        probe = _http_probe(f"http://127.0.0.1:{port}/healthz", None)
        return self._component("kwok", argv, probe)

    def _spawn_scheduler(self, config: SchedulerConfig | None, args: Sequence[str]) -> Component:
        port = free_ports(1)[0]
        self.ports["kube-scheduler"] = port
        self._scheduler_starts += 1
        n = self._scheduler_starts
        config_path = self.workdir / "kube-scheduler" / f"config-{n}.yaml"
        config_path.parent.mkdir(parents=True, exist_ok=True)
        config_path.write_text(yaml.safe_dump(self.scheduler_config_document(config), sort_keys=False))
        self._scheduler_config_path = config_path
        kubeconfig = self.kubeconfig_for("kube-scheduler")
        argv = [
            str(self.binaries.path("kube-scheduler")),
            f"--config={config_path}",
            *self._delegated_authn(kubeconfig),
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"-v={self.scheduler_verbosity}",
            *self.extra_args.get("kube-scheduler", ()),
            *args,
        ]
        probe = _http_probe(f"https://127.0.0.1:{port}/readyz", _insecure_context(), lambda b: b == b"ok")
        # One log per start, so a test sees the log of the scheduler it started.
        return self._component("kube-scheduler", argv, probe, log_name=f"kube-scheduler-{n}")

    def _wait_for_default_service_account(self) -> None:
        # Pods can only be created in a namespace once its `default` ServiceAccount exists;
        # kube-controller-manager makes them, so this also shows that it works.
        deadline = time.monotonic() + self.timeout
        kcm = self.components["kube-controller-manager"]
        while True:
            kcm.check_alive()
            try:
                self.api_get("/api/v1/namespaces/default/serviceaccounts/default")
                return
            except urllib.error.HTTPError as e:
                if e.code != 404:
                    raise
            if time.monotonic() >= deadline:
                raise kcm.error(f"the default ServiceAccount did not appear within {self.timeout:.0f}s")
            time.sleep(0.1)


class SchedulerSwitch:
    """Runs kube-scheduler with another configuration for one test (the `scheduler` fixture);
    `restore()` brings the stock scheduler back if it was changed."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.changed = False

    async def use(self, config: SchedulerConfig) -> Path:
        """Restarts kube-scheduler with CONFIG; returns the file it was written to."""
        self.changed = True
        await self.plane.restart_scheduler_async(config)
        path = self.plane.scheduler_config_path
        assert path is not None
        return path

    async def stop(self) -> None:
        self.changed = True
        await self.plane.stop_scheduler_async()

    async def restore(self) -> None:
        if self.changed:
            await self.plane.restart_scheduler_async(None)
            self.changed = False

    @property
    def log_path(self) -> Path:
        """The log of the kube-scheduler started last."""
        return self.plane.components["kube-scheduler"].log_path
