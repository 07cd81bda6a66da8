"""Every metric topogang exports, in one place, on a registry of its own (one per app).

Names follow the Kubernetes instrumentation conventions: a `topogang_` prefix, base units
(`_seconds`), `_total` on counters, and labels with a small fixed set of values (never a pod or
a group name).

  topogang_extender_request_duration_seconds{verb,code}  histogram  one extender call (bind: with its gate wait)
  topogang_webhook_duration_seconds{code}                histogram  one admission review (every pod create waits for it)
  topogang_plan_duration_seconds{outcome}                histogram  a filter call that planned (or failed to)
  topogang_gang_wait_seconds                             histogram  first member seen -> the whole minimum bound
  topogang_binds_failed_total{reason}                    counter    bind calls answered with an error
  topogang_bind_gate_timeouts_total                      counter    gangs whose bind gate closed before the minimum came
  topogang_preemptions_total                             counter    preemption plans started (victims chosen, room held)
  topogang_preemption_victim_pods_total                  counter    pods chosen as victims by those plans
  topogang_preemption_timeouts_total                     counter    preemptions released because victims did not leave
  topogang_defragmentations_total                        counter    moves started to make a domain whole for a gang
  topogang_pods_moved_total                              counter    pods moved by those (evicted, their new room held)
  topogang_connections_total{protocol}                   counter    TLS connections accepted, by protocol (h2, http/1.1)
  topogang_repairs_total                                 counter    running gangs whose broken part was moved whole
  topogang_unrepairable_total                            counter    broken gangs not mended within the repair timeout
  topogang_reservations                                  gauge      pods holding reserved room (unbound or not made)
  topogang_podgroups{phase}                              gauge      gangs by phase (the leader's last status of each)
  topogang_podgroup_status_writes_total{result}          counter    PodGroup status writes: ok, failed
  topogang_cache_ready                                   gauge      1 when every informer has synced
  topogang_informer_relists_total{resource}              counter    lists after a 410 Gone, per watched resource
  topogang_api_trouble_total{kind}                       counter    API server trouble, by kind
  topogang_leader                                        gauge      1 while this replica holds the Lease
  topogang_leader_transitions_total                      counter    times this replica became the leader
  topogang_held_room_gangs                               gauge      waiting gangs that hold room (reservations)
  topogang_held_room_estimated_start_seconds{group}      gauge      when each gang holding room should start (Unix time)
  topogang_room_holds_total                              counter    reservations made
  topogang_overdue_gangs                                 gauge      waiting gangs past their maximum wait
  topogang_gangs_overdue_total                           counter    gangs that became overdue
  topogang_estimated_start_seconds{group}                gauge      when each of the first --estimate-gangs waiting
                                                                    gangs is expected to start (Unix time)

The two metrics labelled by group are bounded: at most --reservations and --estimate-gangs gangs.

The first fourteen are recorded as things happen; the rest are read when Prometheus scrapes, from
the objects that own them, so nothing on the filter path does more than one histogram
observation (about a microsecond).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# Extender calls take well under a millisecond (filter, prioritize) or wait at the bind gate for
# up to its timeout (25 s by default): buckets cover both.
REQUEST_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
PLAN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
WAIT_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)

# Why a bind call was answered with an error: the fixed values of binds_failed_total{reason}.
BIND_API_ERROR = "api_error"  # the Binding POST failed
BIND_POD_GONE = "pod_gone"  # the pod no longer exists
BIND_REJECTED = "rejected"  # no plan for the pod, or planned on another node
BIND_GATE_TIMEOUT = "gate_timeout"  # waited at the gate, which closed before the minimum came
BIND_CALL_BUDGET = "call_budget"  # waited its call budget at the gate; the pod stays arrived and retries
BIND_PLAN_RELEASED = "plan_released"  # waited at the gate; the plan was released (expired, member gone, re-plan)
BIND_SUPERSEDED = "superseded"  # a newer bind call came for the same pod
BIND_NOT_LEADER = "not_leader"  # this replica is not the leader (or stopped being it while waiting)
BIND_SHUTDOWN = "shutdown"  # the server stopped while the call waited
BIND_FAILURES = (
    BIND_API_ERROR,
    BIND_POD_GONE,
    BIND_REJECTED,
    BIND_GATE_TIMEOUT,
    BIND_CALL_BUDGET,
    BIND_PLAN_RELEASED,
    BIND_SUPERSEDED,
    BIND_NOT_LEADER,
    BIND_SHUTDOWN,
)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Reading = float | Mapping[str, float]


class _Live(Collector):
    """One metric read at scrape time: a number, or a number per value of one label."""

    def __init__(self, kind: str, name: str, doc: str, read: Callable[[], Reading], label: str = "") -> None:
        self.kind, self.name, self.doc, self.read, self.label = kind, name, doc, read, label

    def _family(self) -> GaugeMetricFamily | CounterMetricFamily:
        labels = [self.label] if self.label else None
        if self.kind == "counter":
            return CounterMetricFamily(self.name, self.doc, labels=labels)
        return GaugeMetricFamily(self.name, self.doc, labels=labels)

    def describe(self) -> Iterator[Metric]:
        yield self._family()

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        value = self.read()
        if isinstance(value, Mapping):
            for key, v in sorted(value.items()):
                family.add_metric([key], float(v))
        else:
            family.add_metric([], float(value))
        yield family


class Metrics:
    """The metrics of one server; `registry` is its own unless one is given."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.request_duration = Histogram(
            "topogang_extender_request_duration_seconds",
            "Time to answer one kube-scheduler extender call, by verb and HTTP status code "
            "(bind includes its wait at the gang's bind gate).",
            ["verb", "code"],
            buckets=REQUEST_BUCKETS,
            registry=r,
        )
        self.webhook_duration = Histogram(
            "topogang_webhook_duration_seconds",
            "Time to answer one admission review, by HTTP status code: the API server holds each pod "
            "create it sends us until then (with a pod waiting for its workload to reach the cache).",
            ["code"],
            buckets=REQUEST_BUCKETS,
            registry=r,
        )
        self.plan_duration = Histogram(
            "topogang_plan_duration_seconds",
            "Time of a filter call that planned a gang, by outcome (planned, replanned, extended, pending).",
            ["outcome"],
            buckets=PLAN_BUCKETS,
            registry=r,
        )
        self.gang_wait = Histogram(
            "topogang_gang_wait_seconds",
            "Time from the first filter call for a gang's member to the whole minimum of the gang bound.",
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.binds_failed = Counter(
            "topogang_binds_failed_total", "Bind calls answered with an error, by reason.", ["reason"], registry=r
        )
        for reason in BIND_FAILURES:
            self.binds_failed.labels(reason)
        self.gate_timeouts = Counter(
            "topogang_bind_gate_timeouts_total",
            "Gangs whose bind gate timed out before the whole minimum reached bind (the plan was released).",
            registry=r,
        )
        self.connections = Counter(
            "topogang_connections_total",
            "TLS connections accepted on the extender port, by the protocol ALPN chose (h2, http/1.1).",
            ["protocol"],
            registry=r,
        )
        self.repairs = Counter(
            "topogang_repairs_total", "Running gangs whose broken part was moved whole (its pods evicted).", registry=r
        )
        self.unrepairable = Counter(
            "topogang_unrepairable_total",
            "Running gangs that lost pods and that no repair mended within the repair timeout.",
            registry=r,
        )
        self._room_counters(r)
        self._requests: dict[tuple[str, int], Histogram] = {}

    def _room_counters(self, r: CollectorRegistry) -> None:
        """The counters of room made or held for waiting gangs: preemptions, moves, reservations."""
        self.preemptions = Counter(
            "topogang_preemptions_total",
            "Preemption plans started for gangs that could not be placed (victims chosen, their room held).",
            registry=r,
        )
        self.preemption_victims = Counter(
            "topogang_preemption_victim_pods_total", "Pods chosen as victims by preemption plans.", registry=r
        )
        self.preemption_timeouts = Counter(
            "topogang_preemption_timeouts_total",
            "Preemptions whose victims did not all leave in time (the room held was released).",
            registry=r,
        )
        self.defragmentations = Counter(
            "topogang_defragmentations_total", "Moves started to make a domain whole for a gang.", registry=r
        )
        self.pods_moved = Counter("topogang_pods_moved_total", "Pods moved by those moves.", registry=r)
        self.holds = Counter(
            "topogang_room_holds_total", "Reservations made: a waiting gang given room to hold.", registry=r
        )
        self.overdue = Counter(
            "topogang_gangs_overdue_total",
            "Gangs that waited for room longer than their maximum wait (they became overdue).",
            registry=r,
        )

    # -- recorded as things happen -----------------------------------------------------------------

    def observe_request(self, verb: str, code: int, seconds: float) -> None:
        child = self._requests.get((verb, code))
        if child is None:
            child = self._requests[(verb, code)] = self.request_duration.labels(verb, str(code))
        child.observe(seconds)

    def observe_webhook(self, code: int, seconds: float) -> None:
        self.webhook_duration.labels(str(code)).observe(seconds)

    def observe_plan(self, outcome: str, seconds: float) -> None:
        self.plan_duration.labels(outcome).observe(seconds)

    def bind_failed(self, reason: str, count: int = 1) -> None:
        assert reason in BIND_FAILURES, reason
        if count:
            self.binds_failed.labels(reason).inc(count)

    # -- read at scrape time -------------------------------------------------------------------------

    def gauge(self, name: str, doc: str, read: Callable[[], Reading], label: str = "") -> None:
        self.registry.register(_Live("gauge", name, doc, read, label))

    def counter(self, name: str, doc: str, read: Callable[[], Reading], label: str = "") -> None:
        """NAME without `_total`: the exposition adds it."""
        self.registry.register(_Live("counter", name, doc, read, label))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def watch(
    metrics: Metrics,
    *,
    reservations: Callable[[], Reading],
    phases: Callable[[], Reading],
    status_writes: Callable[[], Reading],
    cache_ready: Callable[[], Reading],
    relists: Callable[[], Reading],
    trouble: Callable[[], Reading],
    leading: Callable[[], Reading],
    transitions: Callable[[], Reading],
    held: Callable[[], Mapping[str, float]],
    overdue: Callable[[], Reading] = lambda: 0.0,
    estimated: Callable[[], Mapping[str, float]] = dict,
) -> None:
    """The metrics read at scrape time, each from the object that keeps the number."""
    what = "Pods holding reserved room: planned, not bound yet (or not created yet)."
    metrics.gauge("topogang_reservations", what, reservations)
    metrics.gauge("topogang_podgroups", "Gangs by phase, as the leader last computed them.", phases, "phase")
    metrics.counter(
        "topogang_podgroup_status_writes", "PodGroup status writes, by result (ok, failed).", status_writes, "result"
    )
    metrics.gauge("topogang_cache_ready", "1 when every informer of the cluster cache has synced.", cache_ready)
    metrics.counter(
        "topogang_informer_relists", "Lists after a watch expired (410 Gone), by watched resource.", relists, "resource"
    )
    metrics.counter(
        "topogang_api_trouble",
        "Requests to the API server that met trouble, by kind: throttled (429), unavailable (connection"
        " failed, 5xx), slow (over 2 s, or timed out); relist: watches that had to list again.",
        trouble,
        "kind",
    )
    metrics.gauge("topogang_leader", "1 while this replica is the leader (plans, binds, writes PodGroups).", leading)
    metrics.counter("topogang_leader_transitions", "Times this replica became the leader.", transitions)
    metrics.gauge("topogang_held_room_gangs", "Waiting gangs that hold room (reservations).", lambda: len(held()))
    metrics.gauge(
        "topogang_held_room_estimated_start_seconds",
        "When each gang holding room is expected to start (Unix time), by gang.",
        held,
        "group",
    )
    metrics.gauge("topogang_overdue_gangs", "Waiting gangs that have waited longer than their maximum wait.", overdue)
    metrics.gauge(
        "topogang_estimated_start_seconds",
        "When each of the first --estimate-gangs waiting gangs is expected to start (Unix time), by gang.",
        estimated,
        "group",
    )
