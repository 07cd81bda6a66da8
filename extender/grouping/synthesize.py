"""The pods a workload's controller would create, for a workload given without pods.

    synthesize(workload) -> Synthesized(pods, owners)

Each pod is a raw v1 Pod: the PodTemplate's labels, annotations and spec (requests,
tolerations, nodeSelector, affinity) plus what the controller adds (its labels, and a controller
ownerReference); `owners` are the intermediate objects between the pods and the workload, so
that the grouper's owner walk finds them:

    Job             Job -> Pod                             <job>-<i>
    Kubeflow v1     TFJob ... -> Pod                       <job>-<replica type>-<i>
    MPIJob v2beta1  MPIJob -> Job <job>-launcher -> Pod    <job>-launcher-0
                    MPIJob -> Pod                          <job>-worker-<i>
    LeaderWorkerSet LWS -> StatefulSet <lws> -> leader Pod <lws>-<g>
                    leader Pod -> StatefulSet <lws>-<g> -> Pod <lws>-<g>-<w>   (w = 1..size-1)
    JobSet          JobSet -> Job <js>-<rjob>-<j> -> Pod   <js>-<rjob>-<j>-<i>
    TrainJob        TrainJob -> JobSet <tj> (from its runtime, or its JobSet when given) -> Job
                    <tj>-<rjob>-<j> -> Pod <tj>-<rjob>-<j>-<i>
    RayCluster      RayCluster -> Pod                      <rc>-head, <rc>-<group>-worker-<i>
    RayJob          RayJob -> RayCluster <rj>-raycluster -> Pod   (the submitter Job comes later,
                    once the cluster runs, and is not created here)
    Deployment      Deployment -> ReplicaSet <deploy>-<hash> -> Pod <deploy>-<hash>-<suffix>
    ReplicaSet      ReplicaSet -> Pod <rs>-<suffix>
    StatefulSet     StatefulSet -> Pod <sts>-<ordinal>

Real controllers add a random suffix to some of these names; synthesized names have none, or
(a ReplicaSet's pods, whose names are only a prefix and a suffix) a suffix derived from the
pod's position, so they are stable. UIDs are derived from kind, namespace and name (uuid5) unless the workload
has one. A workload that cannot be read raises InvalidObject naming the field. What each kind
makes is written in its module under `kinds`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.grouping.kinds import SYNTHESIZERS
from extender.grouping.objects import ObjectLookup
from extender.grouping.synthesis import Synthesis, Synthesized, TooManyPods
from extender.model.errors import FieldError, InvalidObject


def can_synthesize(api_version: str, kind: str) -> bool:
    return (api_version, kind) in SYNTHESIZERS


def synthesized_versions(api_version: str, kind: str) -> tuple[str, ...]:
    """The apiVersions of the same API group and kind whose pods topogang can make (a TFJob of
    kubeflow.org/v2 -> ("kubeflow.org/v1",)); () for a kind it makes no pods for."""
    group = api_version.rpartition("/")[0]
    return tuple(sorted(v for v, k in SYNTHESIZERS if k == kind and v.rpartition("/")[0] == group))


def synthesize(
    workload: Mapping[str, Any], default_namespace: str = "default", objects: ObjectLookup | None = None
) -> Synthesized:
    """The pods and intermediate owners `workload`'s controller would create; raises InvalidObject.
    OBJECTS: the rest of the input, for a kind made from another object (a TrainJob's runtime)."""
    out = Synthesis(workload, default_namespace, objects)
    make = SYNTHESIZERS.get((out.api_version, out.kind))
    if make is None:
        kinds = ", ".join(sorted(f"{k} {v}" for v, k in SYNTHESIZERS))
        msg = (
            f"topogang cannot create the pods of {out.kind} {out.api_version}; give them in the input (it can: {kinds})"
        )
        raise InvalidObject([FieldError(out.obj, "kind", msg)])
    try:
        if not out.errors:
            make(out)
    except TooManyPods:  # the error is in out.errors
        pass
    if out.errors:
        raise InvalidObject(out.errors)
    return Synthesized(tuple(out.pods), tuple(out.owners), tuple(dict.fromkeys(out.read)))


__all__ = ["Synthesized", "can_synthesize", "synthesize", "synthesized_versions"]
