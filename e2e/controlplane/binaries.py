"""Where build.sh put the control-plane binaries."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"
VERSIONS_FILE = HERE / "versions.env"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok")
# Points at a build.sh output directory (the one holding bin/, stages/ and .stamp) to use
# instead of the one build.sh would pick.
DIR_ENV = "TOPOGANG_CONTROLPLANE_DIR"


class BinariesNotBuilt(RuntimeError):
    pass


def pinned_versions() -> dict[str, str]:
    """The KEY=VALUE lines of versions.env."""
    versions = {}
    for raw in VERSIONS_FILE.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            versions[key.strip()] = value.strip()
    return versions


@dataclass(frozen=True)
class Binaries:
    root: Path

    @classmethod
    def locate(cls) -> Binaries:
        """The directory build.sh builds into for the pinned versions; raises BinariesNotBuilt
        (saying what to run) when it is not built."""
        override = os.environ.get(DIR_ENV)
        if override:
            root = Path(override).expanduser()
        else:
            proc = subprocess.run(
                [str(BUILD_SCRIPT), "--print-dir"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            )
            root = Path(proc.stdout.strip())
        binaries = cls(root)
        missing = [b for b in BINARIES if not os.access(binaries.path(b), os.X_OK)]
        if not (root / ".stamp").is_file() or missing or not binaries.stages():
            raise BinariesNotBuilt(
                f"the control plane is not built in {root} (missing: {', '.join(missing) or '-'})"
                "; run `make controlplane` (e2e/controlplane/build.sh) first"
            )
        return binaries

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    def path(self, name: str) -> Path:
        return self.bin_dir / name

    def stages(self) -> list[Path]:
        """kwok's Stage configs copied from the kwok module."""
        return sorted((self.root / "stages").glob("*.yaml"))

    def stamp(self) -> dict[str, str]:
        """What build.sh recorded: versions, Go version, build time."""
        fields = {}
        for line in (self.root / ".stamp").read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep:
                fields[key] = value
        return fields
