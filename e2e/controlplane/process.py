"""One control-plane process: started in its own process group with its output in a log file,
waited on with a timeout, stopped with SIGTERM then SIGKILL, and never left behind.

Three layers make sure no component outlives the run:
- `Component.stop()` (called by `ControlPlane.stop()`, on exceptions and from fixtures);
- an atexit hook that kills every component still running when Python exits normally or on an
  unhandled exception;
- on Linux, when started from the main thread, `setpriv --pdeathsig KILL` so the kernel kills
  the component if the Python process itself dies (SIGKILL, pytest-timeout's os._exit, ...).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType

# A probe returns None when the component is healthy, or a short reason why not.
Probe = Callable[[], str | None]

_live: set[Component] = set()
_live_lock = threading.Lock()


class ComponentError(RuntimeError):
    """A component failed to start, died, or did not become healthy in time. The message names
    the component and ends with the last lines of its log."""

    def __init__(self, component: str, problem: str, log_path: Path, log_tail: str) -> None:
        self.component = component
        self.problem = problem
        self.log_path = log_path
        self.log_tail = log_tail
        super().__init__(f"{component}: {problem}\n--- last lines of {log_path} ---\n{log_tail}\n---")

    @property
    def address_in_use(self) -> bool:
        return "address already in use" in self.log_tail


class Component:
    """A process of the control plane (etcd, kube-apiserver, ...)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        probe: Probe,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.probe = probe
        self.cwd = cwd
        self.env = dict(env) if env is not None else None
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0  # time.monotonic() of the last start

    def __repr__(self) -> str:
        pid = self.process.pid if self.process else None
        return f"Component({self.name!r}, pid={pid}, log={str(self.log_path)!r})"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self) -> None:
        if self.running():
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(f"=== {time.strftime('%H:%M:%S')} {' '.join(self.argv)}\n".encode())
            log.flush()
            self.started_at = time.monotonic()
            self.process = subprocess.Popen(
                _with_parent_death_signal(self.argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
                env=self.env,
                start_new_session=True,  # own process group: Ctrl-C in a terminal reaches only
                # Python, which then stops the components in order
            )
        with _live_lock:
            _live.add(self)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def tail(self, lines: int = 40) -> str:
        try:
            with self.log_path.open("rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 64 * 1024))
                text = f.read().decode(errors="replace")
        except OSError as e:
            return f"(no log: {e})"
        return "\n".join(text.splitlines()[-lines:])

    def error(self, problem: str) -> ComponentError:
        return ComponentError(self.name, problem, self.log_path, self.tail())

    def check_alive(self) -> None:
        """Raises ComponentError if the process has exited."""
        code = self.returncode()
        if self.process is not None and code is not None:
            raise self.error(f"exited with code {code}")

    def _poll_once(self) -> str | None:
        self.check_alive()
        try:
            return self.probe()
        except Exception as e:  # a probe that raises just means "not yet"
            return f"{type(e).__name__}: {e}"

    def wait_healthy(self, timeout_s: float, interval: float = 0.1) -> float:
        """Waits until the probe passes; returns the seconds from the start of the process until
        then. Raises ComponentError if the process exits or the timeout passes first."""
        deadline = time.monotonic() + timeout_s
        while True:
            reason = self._poll_once()
            if reason is None:
                return time.monotonic() - self.started_at
            if time.monotonic() >= deadline:
                raise self.error(f"not healthy after {timeout_s:.0f}s (last probe: {reason})")
            time.sleep(interval)

    async def wait_healthy_async(self, timeout_s: float, interval: float = 0.1) -> float:
        """wait_healthy for event loops: the probe runs in a thread, the loop keeps running."""
        deadline = time.monotonic() + timeout_s
        while True:
            reason = await asyncio.to_thread(self._poll_once)
            if reason is None:
                return time.monotonic() - self.started_at
            if time.monotonic() >= deadline:
                raise self.error(f"not healthy after {timeout_s:.0f}s (last probe: {reason})")
            await asyncio.sleep(interval)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM to the process group, then SIGKILL after GRACE seconds. Idempotent."""
        proc = self.process
        if proc is None:
            return
        try:
            if proc.poll() is None:
                _signal_group(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    _signal_group(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
            # Anything the component itself started in its group goes too.
            _signal_group(proc.pid, signal.SIGKILL)
        finally:
            with _live_lock:
                _live.discard(self)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


@functools.cache
def _setpriv_with_pdeathsig() -> str | None:
    """util-linux's setpriv, if it is there and knows --pdeathsig (2.33+)."""
    setpriv = shutil.which("setpriv") if sys.platform == "linux" else None
    if setpriv is None:
        return None
    try:
        help_text = subprocess.run([setpriv, "--help"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return setpriv if "--pdeathsig" in help_text else None


def _with_parent_death_signal(argv: list[str]) -> list[str]:
    # The kernel sends the signal when the *thread* that forked the child exits, so this is only
    # safe from the main thread (a worker thread may finish long before the run does).
    setpriv = _setpriv_with_pdeathsig()
    if setpriv is None or threading.current_thread() is not threading.main_thread():
        return argv
    return [setpriv, "--pdeathsig", "KILL", "--", *argv]


@atexit.register
def _kill_leftovers() -> None:
    with _live_lock:
        leftovers = list(_live)
    for component in leftovers:
        if component.process is not None and component.process.poll() is None:
            print(f"topogang control plane: killing leftover {component.name}", file=sys.stderr)
            _signal_group(component.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                component.process.wait(timeout=5)


@contextlib.contextmanager
def sigterm_raises_keyboard_interrupt() -> Iterator[None]:
    """While active (main thread only, and only if nobody else handles SIGTERM), SIGTERM raises
    KeyboardInterrupt like Ctrl-C does, so `finally` blocks and fixture teardowns stop the
    components instead of Python dying on the spot."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous not in (signal.SIG_DFL, None):
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
