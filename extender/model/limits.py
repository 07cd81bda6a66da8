"""The sizes topogang accepts, in one place (docs/limits.md has the table; the README's "Limits" sums it up).

They are generous (far beyond any real gang) and exist so that a typo such as `replicas:
1000000000` makes one workload Invalid with a message, in bounded memory and time, instead of
exhausting the process that schedules every other workload.
"""

from __future__ import annotations

# Pods of one gang: the sum of a workload's replicas, or the pods naming one PodGroup.
MAX_GANG_PODS = 100_000
# Replicas of one replica type (or Job parallelism, LWS size, Ray replicas x numOfHosts).
MAX_REPLICAS = MAX_GANG_PODS
# Pods a workload's controller would create, as the simulator synthesizes them.
MAX_WORKLOAD_PODS = MAX_GANG_PODS
# SubGroups of one gang, segments and slices included (a PodGroup object, a ResourceInterface's
# expansion, a workload cut into segments).
MAX_SUBGROUPS = 20_000
# Segments (or slices, all layers together) of one replica type.
MAX_SEGMENTS = MAX_SUBGROUPS
# A resource quantity, in milli-units: Kubernetes keeps quantities in an int64.
MAX_QUANTITY_MILLI = 2**63 - 1

# One ResourceInterface evaluated on one workload object: every jq expression of it together.
JQ_TIME_BUDGET_SECONDS = 1.0
# Memory the jq worker process may take beyond what it needs to start.
JQ_MEMORY_BUDGET_BYTES = 256 * 2**20
# Results one jq expression may yield (a foreach over a list, a list of values).
JQ_MAX_RESULTS = MAX_SUBGROUPS
# Bytes of JSON the results of one expression may take.
JQ_MAX_RESULT_BYTES = 16 * 2**20


def beyond(limit: int) -> str:
    """The end of every message about a size past its limit."""
    return f"topogang's limit is {limit:,} (the README lists the limits)"
