"""The pod grouper: which gang (PodGroup tree) every pod belongs to, built from its workload.

Pure code: no I/O, no asyncio, no logging. The simulator calls it with the objects of its input
file; the extender's cache will call it with what its informers hold.

    group_pods(pods, objects, podgroups) -> GroupingResult
        pods       Sequence[PodInfo]              every pod to consider
        objects    ObjectLookup                   .get(apiVersion, kind, namespace, name) -> raw
                                                  object or None; .resource_interfaces() -> raw
                                                  ResourceInterface objects
        podgroups  Mapping["ns/name", PodGroupSpec]   explicit PodGroup objects, already parsed

    GroupingResult
        groups     key -> Grouping                one per gang
        pod_group  pod key -> group key           every pod that belongs to a group
        waiting    pod key -> reason              its group cannot be resolved yet
        warnings   ResourceInterfaces that target nothing
        (pods in none of these are plain pods)

    Grouping: key, podgroup (None when Invalid), subgroup_of (pod -> leaf SubGroup), order
        (pod -> index), owner (the workload's OwnerRef), errors (FieldErrors: non-empty means
        Invalid), warnings (annotations ignored and why), source ("TFJob ml/train").
        Feed it to the engine with
        build_gang(g.podgroup, pods, topologies, order=g.order, subgroup_of=g.subgroup_of).

    synthesize(workload, objects=None) -> Synthesized(pods, owners, read): the pods (and
        intermediate owners such as a JobSet's Jobs) the workload's controller would create, as
        raw objects; OBJECTS, an ObjectLookup over the rest of the input, for a kind made from
        another object (a TrainJob from its runtime), and `read`, what it read there.

Naming (stable; each module's docstring says more):
    derived PodGroup   "<namespace>/<kind in lower case>-<name>", e.g. "ml/tfjob-train";
                       LeaderWorkerSet: one per group, "ml/leaderworkerset-llm-0";
                       ResourceInterface with several podGroups: "...-<podGroup name>"
    replica types      the replica type in lower case ("worker", "ps", "launcher"), `job` for a
                       Job, `leader`/`workers` for LWS, `head`/<groupName> for Ray,
                       <replicatedJob> and <replicatedJob>-<job index> for JobSet (and the
                       TrainJob whose JobSet it is: "ml/trainjob-llm"), the owner's
                       kind in lower case for owners no grouper knows
    segments           "<replica type>-seg-<k>" (KAI segments), "<replica type>-slice-<k>[-<j>..]"
                       (Kueue slices, one name part per layer)

The rules, module by module: `group` (the order in which a pod's group is decided), `grouper`
(what a grouper reads and answers), `assemble` (replica types and segments become the SubGroup
tree), `annotations` (KAI's and Kueue's placement, segment and slice annotations), `kinds`
(one module per workload kind: its grouper, pod synthesizer, index label, owner Resource and
labels; `kinds.KINDS` lists them; `kinds.apps` only makes the pods of Deployments, ReplicaSets
and StatefulSets), `resource_interface` (KAI's pod-grouping design's declarative grouper with jq),
`synthesize` (pods for workloads given without them), `objects` (what the grouper reads besides
pods, and an ObjectLookup over a list of raw objects), `result` (what `group_pods` returns).
"""

from extender.grouping.group import PODGROUP, Family, explicit_group, family_key, group_pods
from extender.grouping.objects import ObjectIndex, ObjectLookup
from extender.grouping.result import Grouping, GroupingResult
from extender.grouping.synthesize import Synthesized, can_synthesize, synthesize, synthesized_versions

__all__ = [
    "PODGROUP",
    "Family",
    "Grouping",
    "GroupingResult",
    "ObjectIndex",
    "ObjectLookup",
    "Synthesized",
    "can_synthesize",
    "explicit_group",
    "family_key",
    "group_pods",
    "synthesize",
    "synthesized_versions",
]
