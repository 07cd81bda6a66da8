"""Every annotation and label key under the prefixes topogang reads, in one place: the annotations
topogang reads (the constants the rest of topogang uses), the keys each owning project defines, and
`check`, which tells a misspelt key from a key that is merely another project's.

A key a user writes under a watched prefix (`kai.scheduler/`, `kueue.x-k8s.io/`,
`leaderworkerset.sigs.k8s.io/`, `alpha.jobset.sigs.k8s.io/`, `scheduling.topogang.io/`) is:
- one topogang reads, or one its project defines (KAI's queue label, Kueue's queue-name): fine;
- else close to an annotation topogang reads: misspelt. Its gang is Invalid, "did you mean", so a
  constraint the user meant to require is never dropped without a word;
- else: ignored, with a warning on its gang. It may be a key newer than these lists, so it must not
  stop a workload; but it may also be a user's guess at a name, so it is said.
Close means: case aside, difflib's ratio of the two names after the `/` is at least 0.8 under the
same prefix (`topology-required-placment`), or the name is exactly one topogang reads and the prefix
is that close to its own, under any prefix (`kai.schedular/topology`, `jobset.sigs.k8s.io/...`).
Only keys under the watched prefixes, or whose name is one topogang reads, are compared, at most
MAX_COMPARED per object, so a map of thousands of keys costs little.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from extender.model.errors import FieldError

# -- the annotations topogang reads ---------------------------------------------------------------
# KAI's workload annotations (KAI's segment design; the PodGroup API's Topology annotation).
KAI_TOPOLOGY = "kai.scheduler/topology"
KAI_REQUIRED = "kai.scheduler/topology-required-placement"
KAI_PREFERRED = "kai.scheduler/topology-preferred-placement"
KAI_SEGMENT_SIZE = "kai.scheduler/segment-size"
KAI_SEGMENT_REQUIRED = "kai.scheduler/segment-topology-required-placement"
KAI_SEGMENT_PREFERRED = "kai.scheduler/segment-topology-preferred-placement"
KAI_POD_INDEX_LABEL = "kai.scheduler/pod-index-label"
# Kueue's PodSet annotations (Kueue's TAS KEP and API); require-/prefer-topology are the KEP's
# own names, read as aliases.
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
KUEUE_SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
KUEUE_SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
KUEUE_SLICE_CONSTRAINTS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
KUEUE_PODSET_GROUP = "kueue.x-k8s.io/podset-group-name"
KUEUE_REQUIRE = "kueue.x-k8s.io/require-topology"
KUEUE_PREFER = "kueue.x-k8s.io/prefer-topology"
# LeaderWorkerSet's and JobSet's exclusive placement.
LWS_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/exclusive-topology"
LWS_SUBGROUP_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"
JOBSET_EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
# JobSet's node-selector strategy of exclusive placement (nodes labelled per Job beforehand): its
# pod webhook then admits every pod of a Job at once.
JOBSET_NODE_SELECTOR = "alpha.jobset.sigs.k8s.io/node-selector"
# topogang's own.
RUNTIME_BOUND = "scheduling.topogang.io/runtime-bound"
ON_UNREPAIRABLE = "scheduling.topogang.io/on-unrepairable"
MAX_WAIT = "scheduling.topogang.io/max-wait"
MOVABLE = "scheduling.topogang.io/movable"

READ = frozenset(
    {
        KAI_TOPOLOGY,
        KAI_REQUIRED,
        KAI_PREFERRED,
        KAI_SEGMENT_SIZE,
        KAI_SEGMENT_REQUIRED,
        KAI_SEGMENT_PREFERRED,
        KAI_POD_INDEX_LABEL,
        KUEUE_REQUIRED,
        KUEUE_PREFERRED,
        KUEUE_UNCONSTRAINED,
        KUEUE_SLICE_REQUIRED,
        KUEUE_SLICE_SIZE,
        KUEUE_SLICE_CONSTRAINTS,
        KUEUE_PODSET_GROUP,
        KUEUE_REQUIRE,
        KUEUE_PREFER,
        LWS_EXCLUSIVE,
        LWS_SUBGROUP_EXCLUSIVE,
        JOBSET_EXCLUSIVE,
        JOBSET_NODE_SELECTOR,
        RUNTIME_BOUND,
        ON_UNREPAIRABLE,
        MAX_WAIT,
        MOVABLE,
    }
)


def _under(prefix: str, *names: str) -> frozenset[str]:
    return frozenset(prefix + name for name in names)


# -- the keys each project defines ----------------------------------------------------------------
# Annotations, labels and scheduling gates alike: a user may write any of them on any object, and
# none must be taken for a misspelling. Lists read from each project's sources.

# kai-scheduler/KAI-Scheduler v0.17.0 (+9, commit d5bc503a): pkg/common/constants/constants.go,
# pkg/podgrouper/podgrouper/plugins/constants/constants.go, pkg/scheduler/constants/labels/labels.go;
# the designs under docs/developer/designs (segmented-subgroups: pod-index-label; queue-admission-gating;
# k8s-workload-api: ignore-workload-api); examples/batch/README.md (min-member);
# deployments/kai-scheduler/scripts/migrate-topologies.sh (migrated-from).
KAI = _under(
    "kai.scheduler/",
    "queue",
    "node-pool",
    "top-owner-metadata",
    "skip-podgrouper",
    "stale-podgroup-timestamp",
    "last-start-timestamp",
    "last-eviction-timestamp",
    "numa-placement-predicted",
    "numa-placement-observed",
    "accounting",
    "subgroup-name",
    "preemptibility",
    "preemption-delay",
    "staleness-grace-period",
    "topology",
    "topology-required-placement",
    "topology-preferred-placement",
    "segment-size",
    "segment-topology-required-placement",
    "segment-topology-preferred-placement",
    "batch-min-member",
    "min-member",
    "task-priority",
    "pod-index-label",
    "queue-admission",
    "queue-admitted-timestamp",
    "ignore-workload-api",
    "migrated-from",
)

# kubernetes-sigs/kueue v0.19.2 (commit 8eab6877, the newest release the Go module proxy serves):
# apis/kueue/v1beta2/topology_types.go, constants.go and multikueue_types.go,
# pkg/controller/constants/constants.go, pkg/constants/constants.go,
# pkg/controller/jobs/pod/constants/constants.go, pkg/controller/jobs/job/job_controller.go,
# pkg/controller/jobs/raycluster/common.go, pkg/workloadslicing/workloadslicing.go; keys only its KEPs
# and CHANGELOGs name (older releases set them): keps/2724 (tas, node-to-replace), 976, 3125, 6757,
# 6915, 7066, 7990, 8303, 8691, 77, 2941, 3589, 1136, CHANGELOG-0.7 (parent-workload) and -0.10
# (pod-group-index).
KUEUE = _under(
    "kueue.x-k8s.io/",
    "podset-required-topology",
    "podset-preferred-topology",
    "podset-unconstrained-topology",
    "podset-slice-required-topology",
    "podset-slice-size",
    "podset-slice-required-topology-constraints",
    "podset-group-name",
    "topology",
    "workload",
    "pod-index-offset",
    "pod-group-pod-index",
    "pod-group-pod-index-label",
    "workload-slice-name",
    "workload-slice-replacement-for",
    "queue-name",
    "prebuilt-workload-name",
    "job-uid",
    "priority-class",
    "max-exec-time-seconds",
    "safe-to-forcefully-delete",
    "safe-to-forcefully-terminate",
    "job-owner-gvk",
    "job-owner-name",
    "component-workload-index",
    "multikueue",
    "multikueue-origin",
    "multikueue-origin-uid",
    "multikueue-worker-workload-pod",
    "concurrent-admission",
    "concurrent-admission-parent",
    "priority-boost",
    "workload-allowed-resource-flavors",
    "admission",
    "pod-suspending-parent",
    "pod-group-name",
    "pod-group-total-count",
    "pod-group-fast-admission",
    "pod-group-serving",
    "pod-group-role",
    "pod-group-index",
    "pod-group-sets",
    "role-hash",
    "role",
    "retriable-in-group",
    "is-group-workload",
    "managed",
    "managed-namespace",
    "podset",
    "cluster-queue-name",
    "local-queue-name",
    "admission-gated-by",
    "elastic-job",
    "resource-in-use",
    "job-min-parallelism",
    "job-completions-equal-parallelism",
    "stopping",
    "raycluster-podset-replica-sizes",
    "raycluster-generation",
    "tas",
    "node-to-replace",
    "parent-workload",
    "parent-variant",
    "preemption-cost",
    "preemption-gated",
    "cannot-preempt",
    "activate",
    "deactivate",
    "metrics-category-label",
    "dynamically-sized-job",
    "counter-requests",
    "provisioning-request",
)

# kubernetes-sigs/lws v0.10.0 (+11, commit 060ab4d): api/leaderworkerset/v1/leaderworkerset_types.go,
# pkg/utils/accelerators/tpu.go; keps/820-distributed-preflight-check (group-restart-count).
LWS = _under(
    "leaderworkerset.sigs.k8s.io/",
    "exclusive-topology",
    "subgroup-exclusive-topology",
    "name",
    "group-index",
    "worker-index",
    "size",
    "replicas",
    "group-key",
    "leader-name",
    "template-revision-hash",
    "subgroup-index",
    "subgroup-size",
    "subgroup-key",
    "subgroup-policy-type",
    "subdomainPolicy",
    "experimental-recreate-group-after-start",
    "leader-requests-tpus",
    "group-restart-count",
)

# kubernetes-sigs/jobset main after v0.13.0-devel (commit 08dfbdf): api/jobset/v1alpha2/jobset_types.go,
# pkg/constants/constants.go; keps/1282-execution-attempts (execution-attempt).
JOBSET = _under(
    "alpha.jobset.sigs.k8s.io/", "exclusive-topology", "node-selector", "namespaced-job", "no-schedule"
) | _under(
    "jobset.sigs.k8s.io/",
    "jobset-name",
    "jobset-uid",
    "replicatedjob-replicas",
    "global-replicas",
    "replicatedjob-name",
    "job-index",
    "job-global-index",
    "job-key",
    "jobset-controller",
    "coordinator",
    "group-name",
    "group-replicas",
    "job-group-index",
    "in-place-restart-attempt",
    "disable-in-place-restart",
    "restart-attempt",
    "job-restart-attempt",
    "priority",
    "execution-attempt",
)

# topogang's own (docs/annotations.md): read, written on pods, its scheduling gate and webhook label.
TOPOGANG = _under(
    "scheduling.topogang.io/",
    "runtime-bound",
    "on-unrepairable",
    "max-wait",
    "movable",
    "plan-generation",
    "pinned-node",
    "segment-index",
    "gang",
    "gates",
    "leader",
)


@dataclass(frozen=True, slots=True)
class Project:
    name: str
    prefixes: tuple[str, ...]  # the prefixes watched for it (where topogang reads annotations)
    keys: frozenset[str]


PROJECTS = (
    Project("KAI-Scheduler", ("kai.scheduler/",), KAI),
    Project("Kueue", ("kueue.x-k8s.io/",), KUEUE),
    Project("LeaderWorkerSet", ("leaderworkerset.sigs.k8s.io/",), LWS),
    Project("JobSet", ("alpha.jobset.sigs.k8s.io/",), JOBSET),
    Project("topogang", ("scheduling.topogang.io/",), TOPOGANG),
)
KNOWN = READ.union(*(p.keys for p in PROJECTS))
WATCHED = tuple(prefix for p in PROJECTS for prefix in p.prefixes)

CUTOFF = 0.8  # difflib ratio from which two names (or prefixes) are taken for one misspelt
MAX_COMPARED = 64  # unknown keys compared per object; the rest are named in one warning
_LONGEST = max(len(k) for k in READ)
_READ_BY_NAME: dict[str, list[str]] = {}
for _key in sorted(READ):
    _READ_BY_NAME.setdefault(_key.rpartition("/")[2].lower(), []).append(_key)


@dataclass(frozen=True, slots=True)
class Unknown:
    """A written key that is neither read by topogang nor defined by its project."""

    key: str
    meant: str | None  # the key topogang reads it misspells; None: close to none, ignored
    project: str  # whose prefix it is under ("" when only its name matched: a misspelt prefix)


def _project(key: str) -> Project | None:
    return next((p for p in PROJECTS if key.startswith(p.prefixes)), None)


def _ratio(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b).ratio()


@lru_cache(maxsize=2048)
def _meant(key: str) -> str | None:
    """The key topogang reads that KEY (not a known key) misspells, if any."""
    prefix, _, name = key.rpartition("/")
    lowered = key.lower()
    if lowered in READ:  # case only
        return lowered
    for read in _READ_BY_NAME.get(name.lower(), ()):
        if _ratio(prefix.lower(), read.rpartition("/")[0]) >= CUTOFF:
            return read
    if not key.startswith(WATCHED):
        return None
    under = [k for k in READ if k.startswith(prefix + "/")]
    names = [k.rpartition("/")[2] for k in under]
    close = difflib.get_close_matches(name.lower(), names, n=1, cutoff=CUTOFF)
    return f"{prefix}/{close[0]}" if close else None


def check(keys: Iterable[str]) -> tuple[list[Unknown], int]:
    """The keys that are neither read nor defined, each with the key it misspells, if any; and
    how many more keys were not compared (past MAX_COMPARED)."""
    out: list[Unknown] = []
    compared = skipped = 0
    for key in keys:
        if key in KNOWN:
            continue
        project = _project(key)
        if project is None and key.rpartition("/")[2].lower() not in _READ_BY_NAME:
            continue  # another project's key, under a prefix nobody watches
        if compared >= MAX_COMPARED:
            skipped += 1
            continue
        compared += 1
        # A key far longer than any topogang reads cannot be close to one (nor need caching).
        meant = _meant(key) if len(key) <= 2 * _LONGEST else None
        if project is not None or meant is not None:
            out.append(Unknown(key, meant, project.name if project else ""))
    return out, skipped


def ignored(unknown: Unknown) -> str:
    """Why an unknown key that misspells nothing is ignored."""
    if unknown.project == "topogang":
        return "not an annotation topogang reads"
    return f"not an annotation {unknown.project} defines or topogang reads"


def problems(keys: Iterable[str], obj: str, path: str = "metadata.annotations") -> tuple[list[FieldError], list[str]]:
    """The errors (misspelt keys) and warnings (unknown ones) of one object's annotations at PATH."""
    found, skipped = check(keys)
    errors = [
        FieldError(obj, f"{path}[{u.key}]", f"unknown annotation; did you mean {u.meant}?") for u in found if u.meant
    ]
    warnings = [f"{obj}: {path}[{u.key}] ignored: {ignored(u)}" for u in found if u.meant is None]
    if skipped:
        warnings.append(
            f"{obj}: {path}: {skipped:,} more keys under the prefixes topogang reads were not checked"
            f" (it checks {MAX_COMPARED} an object)"
        )
    return errors, warnings
