"""jq with a time and memory budget: a ResourceInterface's expressions run in a worker process.

jq evaluates in C and holds the GIL, so an expression that never ends (`def f: f; f`) or grows
without bound cannot be stopped from inside the process: it would stall the server's event loop
(filter calls group pods synchronously) or the simulator. So expressions run in one long-lived
worker process (`jq_worker.py`): the parent waits for each answer at most the time left in the
budget, kills the worker when it is exceeded (the next call starts a new one), and the worker
caps its own address space. This is the one place in `extender.grouping` that starts a process;
it reads and writes nothing else.

    budget = Budget()                          # one per ResourceInterface per workload object
    results = evaluate(program, args, root_json, budget)   # or raises JqFailed / OverBudget

A verdict that a budget was exceeded is remembered (a bounded map keyed by the expression, its
variables and a digest of the object), so regrouping the same workload does not pay the budget
again.
"""

from __future__ import annotations

import atexit
import hashlib
import select
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import IO, Any

import orjson

from extender.model.limits import (
    JQ_MAX_RESULT_BYTES,
    JQ_MAX_RESULTS,
    JQ_MEMORY_BUDGET_BYTES,
    JQ_TIME_BUDGET_SECONDS,
)

WORKER = Path(__file__).with_name("jq_worker.py")
_REMEMBERED = 1024  # over-budget verdicts kept
STARTUP_SECONDS = 30.0  # a Python interpreter and jq starting: not part of any expression's budget


class JqFailed(Exception):
    """jq refused the expression or failed on this input (its own message)."""


class OverBudget(Exception):
    """The expression needed more time, memory or output than its budget allows."""


class Budget:
    """The time left for the expressions of one ResourceInterface on one object."""

    def __init__(self, seconds: float = JQ_TIME_BUDGET_SECONDS) -> None:
        self.seconds = seconds
        self.left = seconds


class _Worker:
    def __init__(self, memory: int) -> None:
        args = [sys.executable, "-I", str(WORKER), str(memory), str(JQ_MAX_RESULTS), str(JQ_MAX_RESULT_BYTES)]
        self.proc = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True
        )
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.stdin: IO[bytes] = self.proc.stdin
        self.stdout: IO[bytes] = self.proc.stdout
        self.root: bytes | None = None  # the input document the worker holds
        ready, _, _ = select.select([self.stdout], [], [], STARTUP_SECONDS)
        if not ready or not self.stdout.readline():
            self.kill()
            raise OSError(f"the jq worker {WORKER} did not start within {STARTUP_SECONDS:g} s")

    def ask(self, request: bytes, timeout: float) -> tuple[dict[str, Any] | None, bool]:
        """(the answer, False), or (None, whether the time ran out) when the worker did not
        answer: it is killed then."""
        ready: list[Any] = []
        line = b""
        try:
            self.stdin.write(request)
            self.stdin.flush()
            ready, _, _ = select.select([self.stdout], [], [], max(timeout, 0.0))
            line = self.stdout.readline() if ready else b""
        except OSError:  # the worker is gone (a broken pipe)
            pass
        if not line:
            self.kill()
            return None, not ready
        answer: dict[str, Any] = orjson.loads(line)
        return answer, False

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.stdin.close()
        self.stdout.close()


class JqRunner:
    """One worker process, shared by every evaluation; calls are serialised."""

    def __init__(self, memory: int = JQ_MEMORY_BUDGET_BYTES) -> None:
        self.memory = memory
        self._worker: _Worker | None = None
        self._lock = threading.Lock()
        self._over: OrderedDict[bytes, str] = OrderedDict()

    def evaluate(self, program: str, args: dict[str, Any], root: bytes, budget: Budget) -> list[Any]:
        """The results of `program` on the JSON document `root` with `args` bound as $variables."""
        encoded_args = orjson.dumps(args, option=orjson.OPT_SORT_KEYS)
        key = hashlib.blake2b(b"\0".join((program.encode(), encoded_args, root)), digest_size=16).digest()
        with self._lock:
            known = self._over.get(key)
            if known is not None:
                raise OverBudget(known)
            if budget.left <= 0:
                raise OverBudget(f"not run: the {budget.seconds:g} s budget was spent by earlier expressions")
            try:
                worker = self._worker = self._worker or _Worker(self.memory)
            except OSError as exc:
                raise JqFailed(f"not evaluated: {exc}") from None
            # the worker keeps the last object it was sent: one workload's expressions share it
            same = worker.root is root or worker.root == root
            parts = (b'{"p":', orjson.dumps(program), b',"a":', encoded_args, b',"t":', str(budget.left).encode())
            request = b"".join((*parts, b"}\n" if same else b',"r":true}\n' + root + b"\n"))
            worker.root = root
            start = time.monotonic()
            answer, timed_out = worker.ask(request, budget.left)
            budget.left -= time.monotonic() - start
            if answer is None:
                self._worker = None
                if timed_out:
                    budget.left = 0.0
                    why = f"did not finish within the {budget.seconds:g} s budget"
                else:  # jq aborts when an allocation fails under the worker's RLIMIT_AS
                    why = f"exceeded the {self.memory // 2**20} MiB memory budget"
                self._remember(key, why)
                raise OverBudget(why)
        if "ok" in answer:
            results: list[Any] = answer["ok"]
            return results
        if "limit" in answer:
            with self._lock:
                self._remember(key, str(answer["limit"]))
            raise OverBudget(str(answer["limit"]))
        raise JqFailed(str(answer.get("err", "failed")))

    def _remember(self, key: bytes, why: str) -> None:
        self._over[key] = why
        while len(self._over) > _REMEMBERED:
            self._over.popitem(last=False)

    def close(self) -> None:
        with self._lock:
            if self._worker is not None:
                self._worker.kill()
                self._worker = None


RUNNER = JqRunner()
atexit.register(RUNNER.close)


def encode(root: Any) -> bytes:
    """The object expressions run on, encoded once per evaluation."""
    return orjson.dumps(root, option=orjson.OPT_SORT_KEYS)
