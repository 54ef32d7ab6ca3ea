"""Prometheus metrics: one registry per app (so tests can build many apps in one process).

With several uvicorn workers every worker has its own registry; a scrape reaches one of them. Run
one worker per container (and scale containers) when exact per-process counts matter.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kons_service.store import LearnerRef

__all__ = ["Metrics", "MetricsMiddleware"]

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    """The service's counters, gauges and histograms."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, *, per_learner: bool) -> None:
        self.per_learner = per_learner
        self.registry = r = CollectorRegistry()
        self.requests = Counter("kons_http_requests", "HTTP requests by route and status.",
                                ["method", "route", "status"], registry=r)
        self.latency = Histogram("kons_http_request_duration_seconds", "HTTP request latency by route.",
                                 ["method", "route"], buckets=_LATENCY_BUCKETS, registry=r)
        self.rounds = Counter("kons_feedback_rounds", "Feedback rounds acknowledged by this process.",
                              registry=r)
        self.loss = Counter("kons_feedback_loss", "Sum of the losses of the acknowledged rounds.", registry=r)
        self.predictions = Counter("kons_predictions", "Predictions served by this process.", registry=r)
        self.replayed = Counter("kons_replayed_rounds", "Logged rounds replayed into cached learners.",
                                registry=r)
        self.divergence = Counter("kons_replay_divergence",
                                  "Replayed rounds whose prediction differed from the logged one.",
                                  registry=r)
        self.lease_waits = Counter("kons_lease_waits", "Times a write waited for another writer.", registry=r)
        self.conflicts = Counter("kons_append_conflicts", "Compare-and-append attempts that lost.",
                                 registry=r)
        self.deduplicated = Counter("kons_feedback_deduplicated",
                                    "Feedback requests answered from their request_id, not applied again.",
                                    registry=r)
        self.snapshots = Counter("kons_snapshots", "Snapshot attempts by outcome.", ["outcome"], registry=r)
        self.snapshot_seconds = Histogram("kons_snapshot_duration_seconds", "Time to write one snapshot.",
                                          registry=r)
        self.cached = Gauge("kons_cached_learners", "Learners held in this process's memory.", registry=r)
        labels = ["tenant", "learner"]
        self.learner_rounds = Gauge("kons_learner_rounds", "Rounds applied to the learner (its version).",
                                    labels, registry=r)
        self.learner_loss = Gauge("kons_learner_cumulative_loss", "Cumulative loss of the learner.",
                                  labels, registry=r)
        self.learner_recent_loss = Gauge("kons_learner_recent_loss", "Recent (EWMA) loss of the learner.",
                                         labels, registry=r)

    def observe_learner(self, ref: LearnerRef, version: int, stats: dict[str, Any]) -> None:
        if not self.per_learner:
            return
        self.learner_rounds.labels(ref.tenant, ref.name).set(version)
        self.learner_loss.labels(ref.tenant, ref.name).set(stats["cumulative_loss"])
        self.learner_recent_loss.labels(ref.tenant, ref.name).set(stats["recent_loss"])

    def forget_learner(self, ref: LearnerRef) -> None:
        for gauge in (self.learner_rounds, self.learner_loss, self.learner_recent_loss):
            with contextlib.suppress(KeyError):
                gauge.remove(ref.tenant, ref.name)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsMiddleware:
    """Counts requests and times them per route template (never per raw path: bounded cardinality)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        start = time.perf_counter()

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = scope.get("method", "")
            self.metrics.requests.labels(method, template, str(status)).inc()
            self.metrics.latency.labels(method, template).observe(time.perf_counter() - start)
