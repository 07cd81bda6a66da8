"""Where build-components.sh put the workload controllers, Kueue and helm."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .binaries import BinariesNotBuilt

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build-components.sh"
BINARIES = ("jobset-controller", "lws-controller", "training-operator", "trainer-controller-manager", "kueue", "helm")
SETS = ("jobset", "lws", "training-operator", "trainer", "kueue")
# Points at a build-components.sh output directory to use instead of the one it would pick.
DIR_ENV = "TOPOGANG_COMPONENTS_DIR"


@dataclass(frozen=True)
class Components:
    root: Path

    @classmethod
    def locate(cls) -> Components:
        """The directory build-components.sh builds into for the pinned versions; raises
        BinariesNotBuilt (saying what to run) when it is not built."""
        override = os.environ.get(DIR_ENV)
        if override:
            root = Path(override).expanduser()
        else:
            proc = subprocess.run(
                [str(BUILD_SCRIPT), "--print-dir"], capture_output=True, text=True, timeout=30, check=True
            )
            root = Path(proc.stdout.strip())
        found = cls(root)
        missing = [b for b in BINARIES if not os.access(found.path(b), os.X_OK)]
        missing += [f"crds/{s}" for s in SETS if not found.crds(s)]
        if not (root / ".stamp").is_file() or missing:
            raise BinariesNotBuilt(
                f"the components are not built in {root} (missing: {', '.join(missing) or '-'})"
                "; run `make components` (e2e/controlplane/build-components.sh) first"
            )
        return found

    def path(self, name: str) -> Path:
        return self.root / "bin" / name

    def crds(self, component: str) -> list[Path]:
        """The CustomResourceDefinitions the component's module ships."""
        return sorted((self.root / "crds" / component).glob("*.yaml"))

    def webhooks(self, component: str) -> Path:
        """The webhook configurations the component's module ships (config/.../manifests.yaml)."""
        return self.root / "webhooks" / f"{component}.yaml"

    def stamp(self) -> dict[str, str]:
        fields = {}
        for line in (self.root / ".stamp").read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep:
                fields[key] = value
        return fields
