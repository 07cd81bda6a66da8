"""The cache discipline of the Go builds (e2e/controlplane/cache.sh, sourced by build.sh and
build-components.sh), run for real in bash with a stand-in for the slow part: a build that
finishes lands whole, one that fails or is killed leaves nothing taken for done, and a second
build of the same key waits for the first and uses its result."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

CACHE_SH = Path(__file__).resolve().parents[1] / "e2e" / "controlplane" / "cache.sh"

# A build script shaped like build.sh: is_built, cache_begin, the "build", a stamp, cache_finish.
# BUILD_STEP is what the build does between cache_begin and the stamp.
SCRIPT = """
set -euo pipefail
cache_root=$1
key=k1
dest="$cache_root/$key"
is_built() { [[ -f "$dest/.stamp" && -x "$dest/bin/tool" ]]; }
if is_built; then echo "already built"; exit 0; fi
source "$CACHE_SH"
cache_begin fake-build
mkdir -p "$tmp/bin"
eval "$BUILD_STEP"
printf '#!/bin/sh\\necho tool\\n' >"$tmp/bin/tool"
chmod +x "$tmp/bin/tool"
echo "built=now" >"$tmp/.stamp"
cache_finish
"""


def run(root: Path, step: str = "true") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CACHE_SH=str(CACHE_SH), BUILD_STEP=step)
    return subprocess.run(
        ["bash", "-c", SCRIPT, "fake-build", str(root)],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith(".tmp-"))


def test_a_finished_build_lands_whole_and_is_used_the_next_time(tmp_path: Path) -> None:
    first = run(tmp_path)
    assert first.returncode == 0, first.stderr
    assert (tmp_path / "k1" / "bin" / "tool").is_file()
    assert (tmp_path / "k1" / ".stamp").read_text() == "built=now\n"
    assert "cold build took" in first.stdout
    assert leftovers(tmp_path) == []
    again = run(tmp_path)
    assert again.stdout.strip() == "already built"


def test_a_failed_build_leaves_nothing_taken_for_done(tmp_path: Path) -> None:
    failed = run(tmp_path, step='quietly sh -c "echo compiler said no; exit 3"')
    assert failed.returncode == 1
    assert "compiler said no" in failed.stderr
    assert "fake-build: failed: sh -c" in failed.stderr
    assert not (tmp_path / "k1").exists()
    assert leftovers(tmp_path) == []


def test_what_a_killed_build_left_is_cleared_before_building(tmp_path: Path) -> None:
    # A stampless destination (only by hand) and a temporary directory of a killed build,
    # read-only like Go's module cache.
    (tmp_path / "k1" / "bin").mkdir(parents=True)
    (tmp_path / "k1" / "bin" / "half").write_text("")
    stale = tmp_path / ".tmp-k1.abcdef" / "mod"
    stale.mkdir(parents=True)
    (stale / "file").write_text("")
    stale.chmod(0o555)
    done = run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "k1" / "bin" / "half").exists()
    assert leftovers(tmp_path) == []


def test_a_second_build_of_the_key_waits_for_the_first_and_uses_it(tmp_path: Path) -> None:
    # The first build holds the lock until the test lets it finish (a file appears).
    release = tmp_path / "release"
    step = f'while [[ ! -e "{release}" ]]; do sleep 0.05; done'
    env = dict(os.environ, CACHE_SH=str(CACHE_SH), BUILD_STEP=step)
    root = tmp_path / "cache"
    first = subprocess.Popen(
        ["bash", "-c", SCRIPT, "fake-build", str(root)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        # Wait until the first build has its temporary directory (it holds the lock by then).
        deadline = time.monotonic() + 30
        while not (root.exists() and leftovers(root)):
            assert first.poll() is None, "the first build ended early"
            assert time.monotonic() < deadline, "the first build never started"
            time.sleep(0.02)
        second = subprocess.Popen(
            ["bash", "-c", SCRIPT, "fake-build", str(root)],
            env=dict(env, BUILD_STEP="exit 7"),  # would fail if it built
            stdout=subprocess.PIPE,
            text=True,
        )
        out = ""
        assert second.stdout is not None
        for line in second.stdout:  # it says it waits before blocking on the lock
            out += line
            if "waiting" in line:
                break
        assert "waiting (at most an hour) for another build of k1" in out
        release.touch()
        rest, _ = second.communicate(timeout=60)
        assert second.returncode == 0, out + rest
        assert "built meanwhile by another run" in rest
        first.communicate(timeout=60)
        assert first.returncode == 0
    finally:
        if first.poll() is None:
            first.kill()
    assert (root / "k1" / "bin" / "tool").is_file()
    assert leftovers(root) == []
