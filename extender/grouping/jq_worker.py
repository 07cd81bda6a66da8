"""The jq worker process: evaluates one expression per request line, under a memory limit.

Run by `jq_budget` as `python -I jq_worker.py MEMORY MAX_RESULTS MAX_BYTES` (a script, not a
module: it imports nothing of topogang, so it starts in tens of milliseconds). Each request is
one JSON line {"p": program, "a": args, "t": seconds, "r": true}, followed, when "r" is set,
by a line holding the input document as JSON (else the input of the request before is used);
each answer one JSON line,
{"ok": [results]}, {"err": "jq's message"} or {"limit": "which limit"}.

Limits: RLIMIT_AS caps the address space at what the process needs to start plus MEMORY (jq
aborts when an allocation fails, so the parent sees the pipe close); an interval timer kills the
process (SIGALRM's default action) a second after the request's own time budget, should its
parent be gone; results are counted and sized as they come.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
from typing import Any

import jq


class _Limit(Exception):
    pass


_COMPILED: dict[tuple[str, tuple[str, ...]], Any] = {}
_CACHED = 512


def _program(text: str, args: dict[str, Any]) -> Any:
    """The compiled program, reused across requests: the variables come in with the input
    (`[args, root]`) instead of at compile time, since compiling costs milliseconds."""
    names = tuple(sorted(args))
    compiled = _COMPILED.get((text, names))
    if compiled is None:
        binds = "".join(f"($__a[{json.dumps(n)}]) as ${n} | " for n in names)
        try:
            compiled = jq.compile(f". as [$__a, $__r] | {binds}$__r | (\n{text}\n)")
        except ValueError:  # compile it as written, for jq's own message about it
            jq.compile(text, args=args)
            raise
        if len(_COMPILED) >= _CACHED:
            _COMPILED.clear()
        _COMPILED[(text, names)] = compiled
    return compiled


def _address_space() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _limit_memory(extra: int) -> None:
    try:
        limit = _address_space() + extra
    except OSError:  # no /proc: leave the limit to the parent's timeout
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _evaluate(request: dict[str, Any], root: str, max_results: int) -> dict[str, Any]:
    try:
        results = []
        args = request["a"]
        # jq parses the input text itself: cheaper than converting Python values
        program = _program(request["p"], args).input_text(f"[{json.dumps(args)},{root}]")
        for value in program:
            results.append(value)
            if len(results) > max_results:
                raise _Limit(f"yields more than {max_results:,} values")
        return {"ok": results}
    except _Limit as exc:
        return {"limit": str(exc)}
    except MemoryError:
        return {"limit": "exceeds the memory budget"}
    except ValueError as exc:
        text = str(exc).strip()
        return {"err": text.splitlines()[0] if text else type(exc).__name__}


def _answer(request: dict[str, Any], root: str, max_results: int, max_bytes: int) -> str:
    answer = _evaluate(request, root, max_results)
    try:
        text = json.dumps(answer, allow_nan=False)
    except ValueError:  # nan or infinity among the results
        return json.dumps({"err": "a result is not a JSON number (nan or infinite)"})
    if len(text) > max_bytes:
        return json.dumps({"limit": f"yields more than {max_bytes:,} bytes of JSON"})
    return text


def main() -> None:
    memory, max_results, max_bytes = (int(a) for a in sys.argv[1:4])
    _limit_memory(memory)
    sys.stdout.write('{"ready": true}\n')  # the parent's budget starts after this
    sys.stdout.flush()
    root = "null"
    for line in sys.stdin.buffer:
        request = json.loads(line)
        if request.get("r"):
            root = sys.stdin.buffer.readline().decode()
        signal.setitimer(signal.ITIMER_REAL, float(request["t"]) + 1.0)
        answer = _answer(request, root, max_results, max_bytes)
        signal.setitimer(signal.ITIMER_REAL, 0)
        sys.stdout.write(answer + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
