"""Prometheus metrics: one registry per app (so tests can build many apps in one process).

Several workers (``KONS_WORKERS`` > 1): ``python -m kons_service`` gives the run a fresh directory in
``PROMETHEUS_MULTIPROC_DIR`` before the workers start, every worker writes its values there
(prometheus-client's multiprocess mode) and a scrape of any worker reads them all: counters are the sums
over the workers (a worker that exits keeps its counts, so a counter never goes down), gauges of a
learner are the value most recently set by any worker, gauges of the workers themselves carry a ``pid``.
A fresh directory per run matters: files left by an earlier run would be added to this one's counts.

Per-learner series carry the labels ``tenant`` and ``learner``; :meth:`Metrics.render` shows a caller only
those of the tenants it may see (see ``/metrics`` in :mod:`kons_service.http.routers.ops`).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import time
from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
    multiprocess,
)
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from kons_service.store import LearnerRef

__all__ = ["EVERY_TENANT", "LEARNER_GAUGES", "Metrics", "Visible", "multiprocess_dir"]

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: The tenants whose series a caller may see: a set of names, or every tenant.
Visible = frozenset[str] | None
EVERY_TENANT: Visible = None
_WORKER_REFRESH_SECONDS = 1.0

#: ``stats()`` entries exported as per-learner gauges ``kons_learner_<name>``.
LEARNER_GAUGES = {
    "recent_loss": "Recent (exponentially weighted, about 100 rounds) loss of the learner.",
    "cumulative_loss": "Cumulative loss of the learner over its whole history.",
    "dictionary_size": "Points in the learner's dictionary (KORS / sketch size).",
    "stored_points": "Points the learner stores (its support).",
    "effective_dimension": "Online effective dimension: the sum of the rounds' ridge leverage scores.",
    "growth_held": "1 while the learner's growth is held (its byte budget is full: it learns with the "
                   "dictionary it has), else 0.",
}


def multiprocess_dir() -> str | None:
    """The directory of prometheus-client's multiprocess mode, if this run uses it."""
    return os.environ.get(_MULTIPROC_ENV) or None


class _OfTenants:
    """The samples of ``source`` that name no tenant, or one of ``tenants``."""

    def __init__(self, source: Collector, tenants: frozenset[str]) -> None:
        self.source = source
        self.tenants = tenants

    def collect(self) -> Iterable[Metric]:
        for family in self.source.collect():
            samples = [s for s in family.samples if s.labels.get("tenant", "") in self.tenants
                       or "tenant" not in s.labels]
            if samples or not family.samples:
                family.samples = samples
                yield family


class Metrics:
    """The service's counters, gauges and histograms."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, *, per_learner: bool) -> None:
        self.per_learner = per_learner
        self.multiprocess = multiprocess_dir() is not None
        self._children: dict[tuple[MetricWrapperBase, tuple[str, ...]], Any] = {}  # (see _series)
        self.registry = r = CollectorRegistry()
        self.requests = Counter("kons_http_requests", "HTTP requests by route and status.",
                                ["method", "route", "status"], registry=r)
        self.latency = Histogram("kons_http_request_duration_seconds", "HTTP request latency by route.",
                                 ["method", "route"], buckets=_LATENCY_BUCKETS, registry=r)
        self.rounds = Counter("kons_feedback_rounds", "Feedback rounds acknowledged.", registry=r)
        self.loss = Counter("kons_feedback_loss", "Sum of the losses of the acknowledged rounds, by loss.",
                            ["loss"], registry=r)
        self.correct = Counter("kons_feedback_correct", "Acknowledged rounds of classifiers whose played "
                               "prediction (most probable class, or the score's sign) was the label: "
                               "accuracy = rate(correct) / rate(classified).", registry=r)
        self.classified = Counter("kons_feedback_classified", "Acknowledged rounds of classifiers.",
                                  registry=r)
        self.predictions = Counter("kons_predictions", "Predictions served.", registry=r)
        self.learner_cpu = Counter(
            "kons_learner_cpu_seconds", "CPU seconds the learners took to predict (work=predict) and to play "
            "acknowledged feedback rounds (work=feedback), in the thread that ran them: the rest of a "
            "request's CPU is the service's (HTTP, validation, Redis, the cache).", ["work"], registry=r)
        for work in ("predict", "feedback"):
            self.learner_cpu.labels(work)
        self.replayed = Counter("kons_replayed_rounds", "Logged rounds replayed into cached learners.",
                                registry=r)
        self.loads = Counter(
            "kons_learner_loads", "Learners loaded whole from the store (the newest snapshot and the log "
            "after it), by why: cold (not held by this process), dropped (it played rounds its append did "
            "not log: another process appended first, as when requests for one learner go to several "
            "replicas) or behind (held, but the log no longer continues it: trimmed behind a newer snapshot, "
            "the learner replaced or its history rolled back). A learner held and behind is otherwise caught "
            "up from the log (kons_replayed_rounds).", ["reason"], registry=r)
        self.divergence = Counter("kons_replay_divergence",
                                  "Replayed rounds whose prediction differed from the logged one.",
                                  registry=r)
        self.rollbacks = Counter("kons_history_rollbacks", "Times a process found that the store lost rounds "
                                 "its cached learner held (a Redis rollback) and rebuilt from the store.",
                                 registry=r)
        self.rollbacks_detected = Counter(
            "kons_rollbacks_detected", "Redis rollbacks reported, by who saw them: this process's memory "
            "(process), the acknowledged versions kept outside Redis (marks), a client's Kons-Seen-Version "
            "(client); see kons_service/core/rollbacks.py.", ["seen_by"], registry=r)
        for seen_by in ("process", "marks", "client"):
            self.rollbacks_detected.labels(seen_by)
        self.rollback_rounds_lost = Counter(
            "kons_rollback_rounds_lost", "Acknowledged rounds the reported rollbacks removed (at least).",
            registry=r)
        self.version_rollbacks = Counter("kons_version_rollbacks", "Learners rolled back to a kept version "
                                         "(POST /v1/learners/{name}/rollback).", registry=r)
        self.shadow_rounds = Counter("kons_shadow_rounds", "Rounds shadow challengers learnt from their "
                                     "champions' logs.", registry=r)
        self.retention_sweeps = Counter(
            "kons_retention_sweeps", "Learners the periodic sweep applied the retention of kept versions to "
            "(KONS_KEEP_VERSIONS_SWEEP_SECONDS).", registry=r)
        self.shadows_stalled = Counter(
            "kons_shadows_stalled", "Shadow challengers marked stalled: too far behind their champions "
            "(KONS_SHADOW_MAX_LAG_ROUNDS).", registry=r)
        self.shadow_rounds_read = Counter(
            "kons_shadow_rounds_read", "Rounds shadow challengers' catch-ups read back from their champions' "
            "logs (the others were handed over by the champion's writer in the same process).", registry=r)
        self.promotions = Counter("kons_promotions", "Shadow challengers promoted to champion (POST "
                                  "/v1/learners/{name}/promote).", registry=r)
        self.takeovers = Counter("kons_lease_takeovers", "Writer leases taken over from a holder whose "
                                 "process was gone (instead of waiting for the lease to expire).", registry=r)
        self.lease_waits = Counter("kons_lease_waits", "Times a write waited for another writer.", registry=r)
        self.conflicts = Counter("kons_append_conflicts", "Compare-and-append attempts that lost.",
                                 registry=r)
        self.growth_held = Counter("kons_growth_holds",
                                   "Times a learner stopped growing because its byte budget was full (it "
                                   "keeps learning with the dictionary it has).", registry=r)
        self.deduplicated = Counter("kons_feedback_deduplicated",
                                    "Feedback requests answered from their request_id, not applied again.",
                                    registry=r)
        self.store_may_evict = Gauge("kons_store_may_evict", "1 while Redis's eviction policy may delete "
                                     "keys (writes are then refused), else 0.", registry=r,
                                     multiprocess_mode="max")
        self.refused_may_evict = Counter("kons_writes_refused_store_may_evict", "Writes (feedback, creates, "
                                         "state uploads) refused because Redis may evict keys.", registry=r)
        self.snapshots = Counter("kons_snapshots", "Snapshot attempts by outcome.", ["outcome"], registry=r)
        # write amplification = snapshot bytes / log bytes
        self.snapshot_bytes = Counter("kons_snapshot_bytes", "Bytes of snapshots written to Redis.",
                                      registry=r)
        self.log_bytes = Counter("kons_log_bytes", "Bytes of feedback rounds appended to the logs (features, "
                                 "label, play, id).", registry=r)
        self.snapshot_seconds = Histogram("kons_snapshot_duration_seconds", "Time to write one snapshot.",
                                          registry=r)
        self.heavy_turn_waits = Histogram("kons_heavy_turn_wait_seconds", "Time requests with a body over "
                                          "16 KiB waited for their turn once read (KONS_HEAVY_TURNS, "
                                          "KONS_HEAVY_BYTES_RATE; with API keys configured).",
                                          buckets=_LATENCY_BUCKETS, registry=r)
        self.heavy_turns_refused = Counter("kons_heavy_turns_refused", "Requests with a body over 16 KiB "
                                           "answered 429 because their turn would have come later than "
                                           "KONS_HEAVY_TURN_MAX_WAIT_SECONDS.", registry=r)
        # the cache, per process (summed over live workers)
        self.cached = Gauge("kons_cached_learners", "Learners held in memory.", registry=r,
                            multiprocess_mode="livesum")
        self.cached_bytes = Gauge("kons_cached_bytes", "Estimated bytes of the learners held in memory.",
                                  registry=r, multiprocess_mode="livesum")
        self.evictions = Counter("kons_cache_evictions", "Learners evicted from a process's cache, by the "
                                 "budget that evicted them (count or bytes).", ["budget"], registry=r)
        # per learner: counters (so that windowed loss = rate(loss) / rate(rounds), summed over replicas)
        labels = ["tenant", "learner"]
        self.learner_rounds = Counter("kons_learner_rounds", "Feedback rounds acknowledged, per learner.",
                                      labels, registry=r)
        self.learner_loss = Counter("kons_learner_loss", "Sum of the losses of the acknowledged rounds, "
                                    "per learner and loss.", [*labels, "loss"], registry=r)
        self.changes = Counter("kons_changes", "Changes of the data declared by the learners' change "
                               "detectors (auto), in acknowledged feedback rounds.", registry=r)
        self.learner_changes = Counter("kons_learner_changes", "Changes of the data declared by the "
                                       "learner's change detector (see kons_changes).", labels, registry=r)
        self.learner_correct = Counter("kons_learner_correct", "Acknowledged rounds of a classifier whose "
                                       "played prediction was the label, per learner (accuracy = "
                                       "rate(correct) / rate(rounds)).", labels, registry=r)
        # intervals and sets: coverage achieved = rate(covered) / rate(rounds) against the coverage label,
        # mean width (an interval's; a set's size) = rate(width) / rate(rounds)
        conformal = ("Acknowledged feedback rounds answered with an interval or a prediction set", "by the "
                     "coverage asked")
        self.conformal_rounds = Counter("kons_conformal_rounds", f"{conformal[0]}, {conformal[1]}.",
                                        ["coverage"], registry=r)
        self.conformal_covered = Counter("kons_conformal_covered", f"{conformal[0]} that held the label, "
                                         f"{conformal[1]}.", ["coverage"], registry=r)
        self.conformal_width = Counter("kons_conformal_width", "Sum of the widths of the intervals (the "
                                       "sizes of the sets) of the rounds of kons_conformal_rounds, "
                                       f"{conformal[1]}.", ["coverage"], registry=r)
        self.learner_conformal_rounds = Counter("kons_learner_conformal_rounds", "kons_conformal_rounds per "
                                                "learner.", [*labels, "coverage"], registry=r)
        self.learner_conformal_covered = Counter("kons_learner_conformal_covered", "kons_conformal_covered "
                                                 "per learner.", [*labels, "coverage"], registry=r)
        self.learner_conformal_width = Counter("kons_learner_conformal_width", "kons_conformal_width per "
                                               "learner.", [*labels, "coverage"], registry=r)
        self.learner_rollbacks = Counter("kons_learner_history_rollbacks", "Redis rollbacks found, per "
                                         "learner (see kons_rollbacks_detected).", labels, registry=r)
        # ... and gauges of its state, as last set by any worker
        self.learner_version = Gauge("kons_learner_version", "Rounds in the learner's history.", labels,
                                     registry=r, multiprocess_mode="mostrecent")
        self.learner_state_bytes = Gauge("kons_learner_state_bytes", "Bytes of the learner's learned arrays.",
                                         labels, registry=r, multiprocess_mode="mostrecent")
        self.learner_gauges = {
            stat: Gauge(f"kons_learner_{stat}", text, labels, registry=r, multiprocess_mode="mostrecent")
            for stat, text in LEARNER_GAUGES.items()
        }
        build = Gauge("kons_build_info", "The running build (value 1).", ["version", "python", "numpy"],
                      registry=r, multiprocess_mode="max")
        build.labels(importlib.metadata.version("kons"), platform.python_version(),
                     importlib.metadata.version("numpy")).set(1)
        # the process: the standard collectors with one process, per-worker gauges (pid label) with several
        self._process = ProcessCollector(registry=None)
        self.worker_memory = Gauge("kons_worker_resident_memory_bytes", "Resident memory of the worker.",
                                   registry=r, multiprocess_mode="liveall")
        self.worker_cpu = Gauge("kons_worker_cpu_seconds", "CPU time the worker used.",
                                registry=r, multiprocess_mode="liveall")
        self._worker_refreshed = 0.0
        if not self.multiprocess:
            r.register(self._process)
            PlatformCollector(registry=r)

    def _series(self, metric: MetricWrapperBase, *labels: str) -> Any:
        """``metric.labels(*labels)``, looked up once: prometheus-client's lookup (its label checks, a lock)
        costs microseconds, and one feedback touches a dozen series."""
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """One HTTP request, by route template (never the raw path: bounded cardinality)."""
        self._series(self.requests, method, route, str(status)).inc()
        self._series(self.latency, method, route).observe(seconds)
        self.refresh_worker()

    # ------------------------------------------------------------------ learners
    def count_learner_cpu(self, work: str, seconds: float) -> None:
        """The CPU seconds a learner took to ``predict`` or to play ``feedback`` rounds."""
        self._series(self.learner_cpu, work).inc(seconds)

    def count_rounds(self, ref: LearnerRef, loss: str, losses: Sequence[float],
                     correct: Sequence[bool] | None = None) -> None:
        """Acknowledged feedback rounds of ``ref`` with their losses, and for a classifier whether each
        round's prediction was its label."""
        self.rounds.inc(len(losses))
        self._series(self.loss, loss).inc(sum(losses))
        if correct is not None:
            self.classified.inc(len(correct))
            self.correct.inc(sum(correct))
        if self.per_learner:
            self._series(self.learner_rounds, ref.tenant, ref.name).inc(len(losses))
            self._series(self.learner_loss, ref.tenant, ref.name, loss).inc(sum(losses))
            if correct is not None:
                self._series(self.learner_correct, ref.tenant, ref.name).inc(sum(correct))

    def count_covered(self, ref: LearnerRef, rounds: Sequence[tuple[float, bool, float]]) -> None:
        """Acknowledged rounds of ``ref`` answered with an interval or set: each one's coverage, whether
        it held the label and its width (an interval's) or size (a set's)."""
        for coverage, covered, width in rounds:
            level = f"{coverage:g}"
            self.conformal_rounds.labels(level).inc()
            self.conformal_covered.labels(level).inc(covered)
            self.conformal_width.labels(level).inc(width)
            if self.per_learner:
                self.learner_conformal_rounds.labels(ref.tenant, ref.name, level).inc()
                self.learner_conformal_covered.labels(ref.tenant, ref.name, level).inc(covered)
                self.learner_conformal_width.labels(ref.tenant, ref.name, level).inc(width)

    def count_changes(self, ref: LearnerRef, changes: int) -> None:
        """``changes`` changes of the data that ``ref``'s detector declared in acknowledged rounds."""
        self.changes.inc(changes)
        if self.per_learner:
            self.learner_changes.labels(ref.tenant, ref.name).inc(changes)

    def count_rollback(self, ref: LearnerRef, seen_by: str, rounds: int) -> None:
        """The store lost at least ``rounds`` acknowledged rounds of ``ref``; ``seen_by`` as in
        :mod:`kons_service.core.rollbacks`."""
        self.rollbacks_detected.labels(seen_by).inc()
        self.rollback_rounds_lost.inc(rounds)
        if seen_by == "process":
            self.rollbacks.inc()
        if self.per_learner:
            self.learner_rollbacks.labels(ref.tenant, ref.name).inc()

    def observe_learner(self, ref: LearnerRef, version: int, stats: dict[str, Any], state_bytes: int) -> None:
        if not self.per_learner:
            return
        self._series(self.learner_version, ref.tenant, ref.name).set(version)
        self._series(self.learner_state_bytes, ref.tenant, ref.name).set(state_bytes)
        for stat, gauge in self.learner_gauges.items():
            self._series(gauge, ref.tenant, ref.name).set(float(stats.get(stat, 0)))

    def forget_learner(self, ref: LearnerRef) -> None:
        """Drop a deleted learner's gauges. Not possible in multiprocess mode (prometheus-client keeps the
        values in its files): there a deleted learner's series stay until the service restarts."""
        if self.multiprocess:
            return
        for gauge in (self.learner_version, self.learner_state_bytes, *self.learner_gauges.values()):
            self._children.pop((gauge, (ref.tenant, ref.name)), None)
            with contextlib.suppress(KeyError):
                gauge.remove(ref.tenant, ref.name)

    # ------------------------------------------------------------------ process
    def refresh_worker(self) -> None:
        """Update this worker's resource gauges (at most once a second: read from /proc)."""
        now = time.monotonic()
        if now - self._worker_refreshed < _WORKER_REFRESH_SECONDS:
            return
        self._worker_refreshed = now
        for family in self._process.collect():
            if family.name == "process_resident_memory_bytes" and family.samples:
                self.worker_memory.set(family.samples[0].value)
            elif family.name == "process_cpu_seconds" and family.samples:
                self.worker_cpu.set(family.samples[0].value)

    def worker_exits(self) -> None:
        """Drop this worker's live gauges from the shared directory (its counters stay)."""
        directory = multiprocess_dir()
        if directory is not None:
            multiprocess.mark_process_dead(os.getpid(), directory)  # type: ignore[no-untyped-call]

    # ------------------------------------------------------------------ exposition
    def render(self, tenants: Visible) -> bytes:
        """The exposition text, with the per-learner series of ``tenants`` only."""
        self.refresh_worker()
        source = self.registry
        if self.multiprocess:
            source = CollectorRegistry()
            multiprocess.MultiProcessCollector(source)  # type: ignore[no-untyped-call]
        if tenants is None:  # EVERY_TENANT
            return generate_latest(source)
        visible = CollectorRegistry()
        visible.register(_OfTenants(source, tenants))
        return generate_latest(visible)
