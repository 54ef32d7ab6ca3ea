"""The benchmarks whose results the documentation cites: the claim each backs, its command, its outputs
and the source files it measures.

``benchmarks/README.md``'s registry table is :func:`markdown` of :data:`BENCHMARKS`
(``python -m benchmarks.stale --registry`` prints it); ``python -m benchmarks.stale`` uses the sources to
tell whether a result predates the code it measures.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.common import markdown_table

__all__ = ["BENCHMARKS", "Benchmark", "benchmark_of", "markdown", "sources_of"]

_LIBRARY = ("kons",)
_SERVICE = ("kons", "kons_service", "testkit/processes.py")
#: What benchmarks.hotpath_paired measures (its SOURCES, which it records in each result).
_HOTPATH_PAIRED = (*_SERVICE, "benchmarks/hotpath.py", "benchmarks/hotpath_paired.py",
                   "benchmarks/echo_app.py")
#: What the raw regime's kons runs measure (each run records its own: benchmarks/raw_regime.py).
_RAW_REGIME = (*_LIBRARY, "benchmarks/quality.py", "benchmarks/methods.py", "benchmarks/raw_regime.py")


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: what it backs, how to run it, what it writes (under ``benchmarks/results``) and the
    files and folders whose change makes its results stale."""

    claim: str
    command: str
    outputs: tuple[str, ...]
    sources: tuple[str, ...]


BENCHMARKS = (
    Benchmark("Service hot path (issue 18): feedback/predict vs echo, CPU and Redis commands per feedback, "
              "16-client throughput vs its ceiling, snapshot bytes per round, against a baseline checkout",
              "python -m benchmarks.hotpath --parts single clients snapshots --baseline PATH --seconds 10 "
              "--snapshot-seconds 120 --out benchmarks/results",
              ("hotpath.md", "hotpath.json"),
              (*_SERVICE, "benchmarks/hotpath.py", "benchmarks/echo_app.py", "benchmarks/load.py")),
    Benchmark("Service hot path (issue 18): 1,000 auto learners under the default budget, 10,000 learners "
              "against the cache size, cold vs hot predict",
              "python -m benchmarks.hotpath --parts many --many 10000 --out benchmarks/results/hotpath_many",
              ("hotpath_many/hotpath.md", "hotpath_many/hotpath.json"),
              (*_SERVICE, "benchmarks/hotpath.py", "benchmarks/echo_app.py", "benchmarks/load.py")),
    Benchmark("Service hot path, part a alone (issue 36): feedback/predict p50 vs an echo, service CPU per "
              "feedback/predict vs the in-process round, against a baseline checkout measured after it",
              "python -m benchmarks.hotpath --parts single --baseline PATH --seconds 20 "
              "--out benchmarks/results/hotpath_single",
              ("hotpath_single/hotpath.md", "hotpath_single/hotpath.json"),
              (*_SERVICE, "benchmarks/hotpath.py", "benchmarks/echo_app.py", "benchmarks/load.py")),
    Benchmark("The same four figures with a baseline checkout up at once, in alternating blocks (issue 36; "
              "README's fast path quotes its feedback p50 vs an echo)",
              "OPENBLAS_NUM_THREADS=1 nice -n 5 python -m benchmarks.hotpath_paired --baseline PATH "
              "--blocks 16 --rows 40 --out benchmarks/results/hotpath_single",
              ("hotpath_single/paired.md", "hotpath_single/paired.json"), _HOTPATH_PAIRED),
    Benchmark("The same, paired against main before issue 36's hot-path changes (071a3fa)",
              "OPENBLAS_NUM_THREADS=1 nice -n 5 python -m benchmarks.hotpath_paired --baseline PATH_071a3fa "
              "--blocks 16 --rows 40 --name paired_main_071a3fa --out benchmarks/results/hotpath_single",
              ("hotpath_single/paired_main_071a3fa.md", "hotpath_single/paired_main_071a3fa.json"),
              _HOTPATH_PAIRED),
    Benchmark("Service latency vs a bare echo endpoint, lost updates, chantilly peer",
              "python -m benchmarks.load --out benchmarks/results", ("load.md", "raw/load.json"),
              (*_SERVICE, "benchmarks/load.py", "benchmarks/echo_app.py")),
    Benchmark("nystrom_kons over HTTP: feedback p50 at 10k-1M rounds, snapshot and restart times "
              "(docs/library.md)",
              "OPENBLAS_NUM_THREADS=1 python -m benchmarks.nystrom_http --out benchmarks/results",
              ("nystrom_http.md", "nystrom_http.json"),
              (*_SERVICE, "benchmarks/nystrom_http.py", "benchmarks/long_stream.py")),
    Benchmark("Cost per round of the kernel learners; one BLAS thread (docs/library.md, 'How it is fast')",
              "python -m benchmarks.scaling --data cadata --out benchmarks/results",
              ("scaling.md", "scaling.json"),
              (*_LIBRARY, "benchmarks/scaling.py")),
    Benchmark("NystromKONS flat cost and memory to 1,000,000 rounds (docs/library.md, kernel learner table)",
              "OPENBLAS_NUM_THREADS=1 python -m benchmarks.scaling --long-stream --out benchmarks/results",
              ("long_stream.md", "long_stream.json"),
              (*_LIBRARY, "benchmarks/scaling.py", "benchmarks/long_stream.py")),
    Benchmark("The BLAS pin costs about 2 us a round (docs/library.md)",
              "python -m benchmarks.blas_pin --out benchmarks/results",
              ("blas_pin.md",), (*_LIBRARY, "benchmarks/blas_pin.py")),
    Benchmark("ONS rounds on wide sparse rows: the rank-one downdate in place, against a baseline checkout",
              "OPENBLAS_NUM_THREADS=1 python -m benchmarks.ons_rounds --baseline PATH "
              "--out benchmarks/results",
              ("ons_rounds.md",), (*_LIBRARY, "benchmarks/ons_rounds.py")),
    Benchmark("NystromKONS error vs Sketched-KONS on 12 data sets (docs/library.md)",
              "OPENBLAS_NUM_THREADS=1 python -m benchmarks.nystrom_quality --T 5000 --out benchmarks/results",
              ("nystrom_quality.md", "nystrom_quality.json"),
              (*_LIBRARY, "benchmarks/nystrom_quality.py", "benchmarks/methods.py")),
    Benchmark("auto vs River / Vowpal Wabbit on 12 raw data sets (README, 'What to expect'); each run "
              "stamped with what it measures, `--methods stale` re-runs those whose code changed",
              "OPENBLAS_NUM_THREADS=1 python -m benchmarks.quality --regime raw --suite headline "
              "--out benchmarks/results",
              ("quality_raw_regime.md", "quality_raw_regime/"), _RAW_REGIME),
    Benchmark("auto on 14 held-out raw data sets (README, 'What to expect')",
              "OPENBLAS_NUM_THREADS=1 python -m benchmarks.quality --regime raw --suite holdout "
              "--methods auto,peers --out benchmarks/results",
              ("quality_raw_holdout.md", "quality_raw_holdout/"), _RAW_REGIME),
    Benchmark("Multi-class auto (issues 19, 39): a 10-class round vs a binary one, error and log loss on 7 "
              "tuning and 3 held-out multi-class streams vs River's defaults (AMF included) and VW --oaa K "
              "(README, 'What to expect'; docs/library.md)",
              "OPENBLAS_NUM_THREADS=1 python -m benchmarks.multiclass --out benchmarks/results",
              ("multiclass.md",), (*_LIBRARY, "benchmarks/multiclass.py")),
    Benchmark("The label vote's constants (issue 39): each setting's errors on the 7 tuning multi-class "
              "streams (docs/auto.md#label_rate)",
              "OPENBLAS_NUM_THREADS=1 python -m benchmarks.label_vote --out benchmarks/results",
              ("label_vote.md",), (*_LIBRARY, "benchmarks/label_vote.py", "benchmarks/multiclass.py")),
    Benchmark("Records as features (issue 19): auto on records vs arrays per round; auto and ons on "
              "record-shaped raw streams (gaps and categories kept) vs River's record pipeline",
              "OPENBLAS_NUM_THREADS=1 python -m benchmarks.records --out benchmarks/results",
              ("records.md",), (*_LIBRARY, "benchmarks/records.py")),
    Benchmark("How sure is the prediction (issue 38): conformal intervals' coverage per stream and per "
              "1,000-row window on 30 regression streams, width against River's RegressionJackknife and a "
              "global conformal interval, prediction sets against a global threshold, an interval's cost",
              "OPENBLAS_NUM_THREADS=1 python -m benchmarks.intervals --out benchmarks/results (or "
              "--shard i/n runs merged with --merge)",
              ("intervals.md", "intervals.json"),
              (*_LIBRARY, "benchmarks/intervals.py")),
    Benchmark("auto follows a changing world (issue 20): drifting streams against River's defaults and "
              "against auto restarted at each true change",
              "OPENBLAS_NUM_THREADS=1 python -m benchmarks.drift --out benchmarks/results",
              ("drift.md", "drift.json"),
              (*_LIBRARY, "benchmarks/drift.py", "benchmarks/raw_regime.py", "benchmarks/methods.py")),
    Benchmark("Real series in time order (issue 39): auto against River's defaults, AMF and the last target, "
              "overall and per tenth",
              "OPENBLAS_NUM_THREADS=1 python -m benchmarks.series --out benchmarks/results",
              ("series.md", "series.json"),
              (*_LIBRARY, "benchmarks/series.py", "benchmarks/drift.py", "benchmarks/raw_regime.py",
               "benchmarks/methods.py")),
    Benchmark("auto's cost and state flat to 1,000,000 rounds of a changing stream, and a classifier's "
              "(its trees growing) to 200,000 (issue 20)",
              "OPENBLAS_NUM_THREADS=1 python -m benchmarks.auto_long --out benchmarks/results",
              ("auto_long.md",), (*_LIBRARY, "benchmarks/auto_long.py")),
    Benchmark("Each kind of auto's experts: its share of the round's time against its mixture weight and "
              "leads, on the raw regime's tuning and held-out streams and two multi-class streams (issue 36)",
              "OPENBLAS_NUM_THREADS=1 python -m benchmarks.expert_cost --out benchmarks/results",
              ("expert_cost.md", "expert_cost.json", "expert_cost_naps.md", "expert_cost_naps.json"),
              (*_LIBRARY, "benchmarks/expert_cost.py")),
    Benchmark("A mature auto's round and predict against 469cdfb's, paired, in five cases (issue 36)",
              "OPENBLAS_NUM_THREADS=1 python -m benchmarks.auto_round --paired --old PATH --old-name 469cdfb "
              "--out benchmarks/results",
              ("auto_round_paired.md",), (*_LIBRARY, "benchmarks/auto_round.py")),
    Benchmark("A mature auto's saved state against 469cdfb's, in five cases: bytes, zlib bytes, save and "
              "load CPU (issue 36: state bytes <= 0.6x)",
              "OPENBLAS_NUM_THREADS=1 python -m benchmarks.state_bytes --old PATH_469cdfb --names 469cdfb "
              "--repeats 2 --saves 5 --out benchmarks/results",
              ("state_bytes.md", "state_bytes.json"), (*_LIBRARY, "benchmarks/state_bytes.py")),
    Benchmark("auto on stationary data before and after issue 20: the 26 raw sets within 1%",
              "python -m benchmarks.drift_stationary --after DIR --out benchmarks/results (DIR: the --out of "
              "`benchmarks.quality --regime raw --methods auto` runs of both suites)",
              ("drift_stationary.md",),
              (*_LIBRARY, "benchmarks/drift_stationary.py", "benchmarks/raw_regime.py",
               "benchmarks/methods.py")),
    Benchmark("A learner's life (issue 37, docs/lifecycle.md): a poisoned stretch rolled back, a shadow "
              "challenger promoted by its paired test, a shadow's cost per feedback, kept versions' bytes",
              "nice -n 5 python -m benchmarks.lifecycle --out benchmarks/results",
              ("lifecycle.md", "lifecycle.json"),
              (*_SERVICE, "benchmarks/lifecycle.py")),
    Benchmark("Lease takeover after a SIGKILL (README, docs/reliability.md)",
              "python -m benchmarks.takeover --runs 10 --baseline main --out benchmarks/results/takeover.md",
              ("takeover.md",),
              (*_SERVICE, "benchmarks/takeover.py")),
    Benchmark("Hostile senders do not starve others: the victim's p99 per round against the idle rounds next "
              "to it (docs/reliability.md)",
              "OPENBLAS_NUM_THREADS=1 python -m benchmarks.hostile --seconds 3 --rounds 6 --sender-nice 19 "
              "--baseline PATH --out benchmarks/results/hostile_fairness.md",
              ("hostile_fairness.md", "hostile.md", "hostile_fairness_loaded.md"),
              (*_SERVICE, "benchmarks/hostile.py")),
    Benchmark("Scaling out behind the shipped HAProxy: 2 replicas against 1, full loads per 1,000 requests "
              "against round robin, a replica SIGKILLed behind it, a tenant alone with and without quotas "
              "(docs/scaling.md)",
              "nice -n 5 python -m benchmarks.scaleout --seconds 15 --warmup 8 --rounds 2 --baseline PATH "
              "--out benchmarks/results",
              ("scaleout.md", "scaleout.json"),
              (*_SERVICE, "deploy/haproxy/haproxy.cfg", "benchmarks/scaleout.py", "benchmarks/hostile.py")),
    Benchmark("What fair sharing costs heavy requests: batch predicts with keys configured against "
              "single-tenant (docs/service.md)",
              "python -m benchmarks.heavy_bodies --requests 400 --out benchmarks/results/heavy_bodies.md",
              ("heavy_bodies.md",), (*_SERVICE, "benchmarks/heavy_bodies.py")),
    Benchmark("Redis Cluster under real failures, with and without WAIT; the write pause WAIT costs "
              "(docs/service.md, docs/reliability.md)",
              "python -m benchmarks.cluster_failover --seeds 3 --kills 6 "
              "--json benchmarks/results/cluster_failover.json",
              ("cluster_failover.json",),
              (*_SERVICE, "testkit/scenarios.py", "benchmarks/cluster_failover.py")),
    Benchmark("The cost of acknowledged-version marks (KONS_ACK_MARKS_DIR) on a feedback "
              "(docs/reliability.md)",
              "python -m benchmarks.ack_marks --runs 4 --out benchmarks/results",
              ("ack_marks.md", "ack_marks.json"), (*_SERVICE, "benchmarks/ack_marks.py")),
    Benchmark("The learner cache's own cost per request with 100 to 10,000 learners held, against a "
              "baseline revision's (docs/service-design.md)",
              "nice -n 5 python -m benchmarks.cache_evict --baseline 96b1514 --blocks 4 --requests 1000 "
              "--out benchmarks/results",
              ("cache_evict.md", "cache_evict.json"),
              ("kons_service/core/cache.py", "benchmarks/cache_evict.py")),
    Benchmark("What the history's coverage and calibration totals cost a feedback: the offer in the service "
              "and record_point in Redis, against a baseline revision's, and the bytes of a point "
              "(docs/intervals.md)",
              "nice -n 5 python -m benchmarks.history_cost --baseline 071a3fa --out benchmarks/results",
              ("history_cost.md", "history_cost.json"),
              ("kons_service/core/history.py", "kons_service/lua/lib/history.lua",
               "kons_service/lua/history.lua", "benchmarks/history_cost.py")),
    Benchmark("Snapshots by what they save: snapshot bytes per acknowledged feedback against the log's, "
              "0.25 to 100 feedbacks/s per learner, the code before beside (docs/service-design.md)",
              "nice -n 5 python -m benchmarks.snapshot_rate --baseline /tmp/kons-before "
              "--out benchmarks/results",
              ("snapshot_rate.md", "snapshot_rate.json"), (*_SERVICE, "benchmarks/snapshot_rate.py")),
    Benchmark("The same for the default learner, `auto`, fed slowly (issue 40's one feedback every 4 s)",
              "nice -n 5 python -m benchmarks.snapshot_rate --algorithm auto --rates 0.25 1 "
              "--baseline /tmp/kons-before --out benchmarks/results",
              ("snapshot_rate_auto.md", "snapshot_rate_auto.json"),
              (*_SERVICE, "benchmarks/snapshot_rate.py")),
    Benchmark("The capacity model's prediction (CPU per feedback, throughput, memory per learner) against a "
              "measured run of 200 `auto` learners (docs/capacity.md)",
              "nice -n 5 python -m benchmarks.capacity --out benchmarks/results",
              ("capacity.md", "capacity.json"),
              (*_SERVICE, "benchmarks/hotpath.py", "benchmarks/capacity.py")),
    Benchmark("Memory in a soak: replica RSS and Redis memory level off under steady mixed traffic "
              "(issue 41)",
              "nice -n 5 python -m benchmarks.soak --seconds 480 --out benchmarks/results",
              ("soak.md", "soak.json"), (*_SERVICE, "benchmarks/soak.py")),
    Benchmark("Memory in a long soak: 80 minutes at a paced rate, past the hour retry records and kept "
              "versions live; where Redis's memory goes (issue 41)",
              "nice -n 10 python -m benchmarks.soak --seconds 4800 --sample-seconds 60 --rate 12 --clients 4 "
              "--checkout <main's checkout> --name soak_long --out benchmarks/results",
              ("soak_long.md", "soak_long.json"), (*_SERVICE, "benchmarks/soak.py")),
    Benchmark("Reliability battery: every promise kept (docs/reliability.md)",
              "python -m benchmarks.reliability --out docs/reliability.md "
              "--json benchmarks/results/reliability.json",
              ("reliability.json",), (*_SERVICE, "testkit/scenarios.py", "benchmarks/reliability.py")),
)


def benchmark_of(output: str) -> Benchmark | None:
    """The registered benchmark that writes ``output`` (None if none does); an output ending in ``/`` is a
    folder of results."""
    return next((b for b in BENCHMARKS
                 if any(output == o or (o.endswith("/") and output.startswith(o)) for o in b.outputs)), None)


def sources_of(output: str) -> tuple[str, ...] | None:
    """The sources measured by the registered benchmark that writes ``output`` (None if none does)."""
    benchmark = benchmark_of(output)
    return None if benchmark is None else benchmark.sources


def markdown() -> list[str]:
    """The registry as the lines of a Markdown table."""
    return markdown_table(
        ["claim", "command", "output (benchmarks/results/)"],
        [(b.claim, f"`{b.command}`", ", ".join(f"`{o}`" for o in b.outputs)) for b in BENCHMARKS])
