"""Reliability battery of the service: crashes, Redis faults, replicas, a Redis that rolls back or evicts,
hostile senders, fuzzing, soak.

The scenarios and the audit of a storm are in :mod:`testkit.scenarios` (the module doc says how a storm
is audited); the tests in ``tests/reliability`` run them with small numbers. This command line runs them
with the big ones and the service's default settings, adds the hostile-sender measurement
(:mod:`benchmarks.hostile`) and the fuzzing run, and writes the report, which opens with what each
durability setting promises::

    python -m benchmarks.reliability --out docs/reliability.md          # the full battery (~11 min)
    python -m benchmarks.reliability --quick                             # a smoke run (~4 min)

Every line of ``docs/reliability.md``, its Summary table included, is written here, never by hand:
``tests/benchmarks/test_reliability_report.py`` renders it again from the committed figures and compares.
The cluster section may come from a separate, longer run of :mod:`benchmarks.cluster_failover`::

    python -m benchmarks.reliability --from-json benchmarks/results/reliability.json \
        --cluster-json benchmarks/results/cluster_failover.json --out docs/reliability.md
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from benchmarks import cluster_failover, registry
from benchmarks.common import REPO, blas_env, command_line, machine_summary, markdown_table
from benchmarks.provenance import provenance, stamp_json
from kons_service.store.embedded import redis_server_binary
from testkit.scenarios import (
    crash_scenario,
    eviction_scenario,
    failover_scenario,
    redis_fault_scenario,
    replica_scenario,
    restart_rollback_scenario,
    rollback_scenario,
    soak_scenario,
)

__all__ = ["main"]


def _fuzz(workdir: Path, examples: int) -> dict[str, Any]:
    """Schemathesis against the running service (see ``tests/reliability/test_fuzz.py``)."""
    out = workdir / "fuzz.json"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/reliability/test_fuzz.py"]
    env = {**os.environ, "FUZZ_EXAMPLES": str(examples), "FUZZ_REPORT": str(out)}
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                          timeout=1200, check=False, env=env)
    report = json.loads(out.read_text()) if out.exists() else {}
    return {"pytest_exit": proc.returncode, **report,
            "pytest_tail": proc.stdout.strip().splitlines()[-1:] if proc.stdout else []}


def _hostile(seconds: float) -> dict[str, Any]:
    """A victim tenant's predict latency, idle and under two unauthenticated or two authenticated
    senders of large bodies: ``python -m benchmarks.hostile`` in a process of its own (one BLAS thread),
    its table read back by column name."""
    cmd = [sys.executable, "-m", "benchmarks.hostile", "--seconds", str(seconds), "--rounds", "3",
           "--sender-nice", "19"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, check=False,
                          env={**os.environ, **blas_env(1)})
    first_table = proc.stdout.split("\n\n")[0]  # (the per-round table follows it)
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in first_table.splitlines() if line.startswith("|") and not line.startswith("|---")]
    if proc.returncode or len(rows) < 2:
        return {"exit": proc.returncode, "error": (proc.stderr or proc.stdout).strip()[-1500:]}
    header = rows[0]
    phases = {}
    for row in rows[1:]:
        cells = {column: _number(cell) for column, cell in zip(header, row, strict=True)}
        phases[str(cells.pop("phase"))] = cells
    # The per-round table: | phase | service | round | p99 ms | idle p99 ms | ratio | machine noise |.
    rounds: dict[str, list[float]] = {}
    for line in proc.stdout.split("\n\n", 1)[1].splitlines():
        fields = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(fields) == 7 and fields[2].isdigit():
            rounds.setdefault(fields[0], []).append(float(fields[5].rstrip("x")))
    return {"exit": 0, "seconds_per_phase": seconds, "phases": phases,
            "rounds_p99_over_adjacent_idle": rounds}


def _number(cell: str) -> float | str:
    try:
        return float(cell)
    except ValueError:
        return cell


def _failover_steps(workdir: Path) -> list[tuple[str, Callable[[], Awaitable[dict[str, Any]]]]]:
    """The failover scenario, with and without ``KONS_REDIS_WAIT_REPLICAS``: a primary + replica pair whose
    replica is promoted mid-storm."""
    return [(f"failover_{name}",
             # mypy cannot infer a lambda whose defaults bind the loop's values
             lambda name=name, wait=wait: failover_scenario(  # type: ignore[misc]
                 workdir / f"failover-{name}", wait=wait))
            for name, wait in (("wait", True), ("no_wait", False))]


def _markdown(results: dict[str, Any], command: str, seconds: float) -> str:
    crash, faults, replicas = results["crash"], results["redis_faults"], results["replicas"]
    soak, fuzz = results["soak"], results.get("fuzz", {})
    lines = [
        "# Reliability of the kons service",
        "",
        _PROMISES,
        "## Measured",
        "",
        "Figures from one run of the reliability battery on this machine. Reproduce with:",
        "",
        f"    {command}",
        "",
        f"Machine: {results['run'].get('machine') or machine_summary()} shared with other work, loopback "
        f"only; one run of {seconds / 60:.1f} min. Throughput and latency figures are those of a shared "
        "2-core box, not a benchmark: what matters are the counts of lost, duplicated and 5xx answers, which "
        "must be 0.",
        "",
        _settings_paragraph(results),
        "",
        "The fast versions of every scenario are pytest tests: `python -m pytest tests/reliability` "
        "(heavier ones are marked `slow`). The raw figures of a run are written with `--json` (this one: "
        "`benchmarks/results/reliability.json`); `--from-json` re-renders this page from them.",
        "",
        "### Summary",
        "",
        *markdown_table(["Promise", "Figure"], [
            ("Crash durability",
             f"{crash['kills']} SIGKILLs survived; {crash['acknowledged_rounds']} rounds acknowledged, "
             f"**{crash['lost']} lost, {crash['duplicated']} duplicated**; state == serial replay: "
             f"{crash['state_equals_replay']}"),
            *_if_run(results["crash"], "write_stall_s", lambda _: _stall_row(crash)),
            ("Redis faults",
             f"restart, {faults['phases']['outage']['seconds_down']} s outage, "
             f"{faults['phases']['freeze']['seconds_down']} s freeze: {faults['status_503']} answers 503, "
             f"**{faults['status_5xx_other_than_503']} other 5xx**, slowest answer "
             f"{faults['max_latency_s']} s; {faults['acknowledged_rounds']} acknowledged, **{faults['lost']} "
             f"lost, {faults['duplicated']} duplicated**"),
            ("Redis outage behaviour",
             "answers to requests sent while Redis was down: "
             + "; ".join(f"{n}: {_statuses(p)}, slowest {p['slowest_answer_s']} s"
                         for n, p in faults["phases"].items())
             + f" (bound: lease wait {faults['lease_wait_s']} s + 6 x Redis timeout "
             f"{faults['redis_timeout_s']} s); first 200 after Redis came back: "
             + ", ".join(f"{n} {p['first_200_after_s']} s" for n, p in faults["phases"].items())
             + f"; service restarts needed: {faults['service_restarted']}"),
            *_if_run(results, "redis_sigkill", _sigkill_row),
            ("Replicas",
             f"{replicas['replicas']} processes, {replicas['acknowledged_rounds']} rounds: "
             f"version == acknowledged: {replicas['final_version'] == replicas['acknowledged_rounds']}; "
             f"probes bit-identical: {replicas['replicas_agree_on_probes']}; "
             f"state == serial replay: {replicas['state_equals_replay']}"),
            *_if_run(results, "rollback", _rollback_row),
            *_if_run(results, "rollback_restart", _restart_rollback_row),
            *_if_run(results, "rollback_restart_marks", _restart_rollback_row),
            *_if_run(results, "eviction", _eviction_rows),
            *_if_run(results, "hostile", _hostile_row),
            *_failover_rows(results),
            ("Fuzzing",
             f"{fuzz.get('requests', '?')} requests over {fuzz.get('operations', '?')} operations: "
             f"**{fuzz.get('server_errors', '?')} 5xx, {fuzz.get('schema_violations', '?')} schema "
             "violations**"),
            (f"Memory (soak {soak['seconds']:.0f} s, {soak['rounds']} rounds)",
             f"service RSS {soak['rss_kib_first'] / 1024:.1f} → {soak['rss_kib_max'] / 1024:.1f} MiB max, "
             f"{soak['rss_kib_last'] / 1024:.1f} MiB last; second-half drift "
             f"{(soak['rss_kib_per_minute_second_half'] or 0) / 1024:.2f} MiB/min; learners' own state "
             f"{soak['learners_state_bytes'] / 1024:.1f} KiB"),
        ]),
        "",
        _verdict(results),
        "",
    ]
    for title, key in _SECTIONS:
        if key not in results:
            continue
        shown = {k: v for k, v in results[key].items() if k != "rss_series"}
        lines += [f"### {title}", "", *_EXPLAINED.get(key, []),
                  "```json", json.dumps(shown, indent=2), "```", ""]
        if key == "soak":
            series = results[key]["rss_series"]
            step = max(1, len(series) // 18)
            lines += ["Service VmRSS (from `/proc/<pid>/status`) over the soak, seconds → MiB:", "",
                      "    " + ", ".join(f"{t:.0f}s {k / 1024:.1f}" for t, k in series[::step]), ""]
    if "cluster" in results:  # the battery's own cluster run, or a separate one's (--cluster-json)
        run = results["cluster"].get("run", results["run"])
        lines += [cluster_failover.markdown({**results["cluster"], "run": run}, run.get("command", command))]
    lines += [_NOTES]
    return "\n".join(lines)


def _verdict(results: dict[str, Any]) -> str:
    failures = _failures(results)
    if not failures:
        return "Every promise the battery checks was kept in this run."
    return "**Not kept in this run:** " + "; ".join(failures) + "."


_SECTIONS = [("Crash durability", "crash"), ("Redis faults", "redis_faults"),
             ("Redis SIGKILL (appendfsync everysec)", "redis_sigkill"), ("Replicas", "replicas"),
             ("Redis rollback", "rollback"), ("Redis rollback across a restart", "rollback_restart"),
             ("Redis rollback across a restart, with marks", "rollback_restart_marks"),
             ("Evicting Redis", "eviction"), ("Hostile senders", "hostile"),
             ("Failover with `KONS_REDIS_WAIT_REPLICAS=1`", "failover_wait"),
             ("Failover without waiting for replicas", "failover_no_wait"), ("Soak", "soak"),
             ("Fuzzing", "fuzz")]

_EXPLAINED = {
    "rollback": [
        "Two service processes take a storm while the learner's keys in Redis are put back, several times, "
        "as they were up to a second earlier (`DUMP`/`RESTORE`, expiries kept): what a Redis restarted from "
        "an append-only file that misses its last second, or a failover to a replica that missed it, leaves "
        "behind. During each loss window the storm goes to the first process only (it holds the rounds "
        "that are lost), right after it to the second only (it takes their versions again with other "
        "rounds), then to both. `lost_by_the_rollbacks` are acknowledged rounds the rollbacks removed (the "
        "request-id records Redis keeps with every round are the oracle); the `survivors_*` figures audit "
        "the other acknowledged rounds like any storm; `rollbacks_detected_per_replica` counts each "
        "process's log lines `the store lost rounds of ...`.", ""],
    "rollback_restart": [
        "A host reboot with Redis and the service on it: two service processes on a redis-server that keeps "
        "only RDB snapshots; per trial, `SAVE`, 4 more rounds acknowledged through the first process, then "
        "Redis and that process SIGKILLed and restarted: Redis comes back from the older file and no "
        "process holds the lost rounds any more. The client sends back the newest version it was answered "
        "(`Kons-Seen-Version`), in a predict to the second process and a feedback to the restarted one; "
        "`reports_*` are their log lines, parsed: who saw the loss, the versions each names as lost.", ""],
    "rollback_restart_marks": [
        "The same with `KONS_ACK_MARKS_DIR` set on both processes: the restarted process gets a predict "
        "without any version first, and must report the loss from its predecessor's marks.", ""],
    "eviction": [
        "A real redis-server with `maxmemory-policy allkeys-lru`: the service refuses to start on it; a "
        "service whose Redis is switched to it at run time reports not ready; with the explicit override "
        "(`KONS_REDIS_REQUIRE_NOEVICTION=false`) it runs, and a load of small learners under a `maxmemory` "
        "just above Redis's use shows what vanishes; the same load on `noeviction` shows what the required "
        "policy does instead.", ""],
    "hostile": [
        "`python -m benchmarks.hostile`: a victim tenant's sequential predicts (p50/p99 in ms), idle, then "
        "while two processes post bodies of about 8 MiB of JSON with a wrong key (unauthenticated), then "
        "with another tenant's valid key (authenticated), while four tenants post 60 KiB bodies, and while "
        "a neighbour trains an exact learner; each phase is three rounds interleaved with the other "
        "phases', each with an idle round right before and after it. `rounds_p99_over_adjacent_idle` gives "
        "every round's p99 over the mean p99 of those two idle rounds (the promise: at most 3 in every "
        "round); `benchmarks/results/hostile_fairness.md` has a longer run beside the previous code. The "
        "senders run at niceness 19: hostile senders are other machines, which take none of the service's "
        "cores, while here everything shares two; at niceness 0 they also starve the victim's own client "
        "(a run at niceness 0 is `benchmarks/results/hostile.md`). Latencies on a shared 2-core box.", ""],
}


def _settings_paragraph(results: dict[str, Any]) -> str:
    redis: str = results.get("run", {}).get("redis", "redis-server")
    changed = [f"{name} ({json.dumps(r['settings'])}: {r.get('settings_why', 'see the test')})"
               for name, r in results.items() if isinstance(r, dict) and r.get("settings")]
    return ("Settings: every scenario runs the service with the defaults of `kons_service/settings.py` "
            "(only API keys are set), on " + redis + " with `appendonly yes`, `appendfsync everysec` and "
            "`maxmemory-policy noeviction`, as `docker-compose.yml` and the embedded server run it"
            + (", except " + "; ".join(changed) if changed else "")
            + ". The fuzzing run caps bodies at 64 KiB and batches at 50 rows "
            "(`tests/reliability/test_fuzz.py`) so that generated requests stay fast.")


Rows = list[tuple[str, str]]
T = TypeVar("T")


def _if_run(results: dict[str, Any], key: str, render: Callable[[dict[str, Any]], list[T]]) -> list[T]:
    """``render`` applied to the figures of scenario ``key``; nothing when the run did not have it."""
    return render(results[key]) if key in results else []


def _stall_row(crash: dict[str, Any]) -> Rows:
    stall = crash["write_stall_s"]
    return [("Write stall after a SIGKILL (one process, restarted)",
             f"first acknowledgement after the kill: median {stall['from_kill']['median']} s, max "
             f"{stall['from_kill']['max']} s; the restart alone (until /healthz answers): median "
             f"{stall['restart']['median']} s, max {stall['restart']['max']} s; the rest is the "
             "replay of the rounds logged since the newest snapshot and the takeover of the killed "
             f"writer's lease (its TTL, {crash['lease_ttl_ms']} ms, only where Redis cannot tell that "
             "the writer is gone)")]


def _restart_rollback_row(r: dict[str, Any]) -> Rows:
    lost = [trial["lost_rounds"] for trial in r["trials"]]
    first = ("its predecessor's marks (`KONS_ACK_MARKS_DIR`)" if r["marks"]
             else "the client's `Kons-Seen-Version`")
    return [(f"Redis rollback across a restart{', with marks' if r['marks'] else ''}", (
        f"{len(lost)} host reboots (Redis back from an older RDB file, the service restarted with it): "
        f"{'/'.join(map(str, lost))} acknowledged rounds lost; reported with the right versions "
        f"**{r['reported_with_the_right_extent']} of {r['reports_expected']}** times (the restarted process "
        f"from {first}, and one that never held them from the client's version)"))]


def _rollback_row(r: dict[str, Any]) -> Rows:
    detected = r["rollbacks_detected_per_replica"]
    survivors = {key[len("survivors_"):]: value for key, value in r.items() if key.startswith("survivors_")}
    return [("Redis rollback", "; ".join([
        f"{r['rollbacks']} rollbacks under {r['replicas']} replicas: {r['acknowledged']} acknowledged",
        f"{r['lost_by_the_rollbacks']} lost by the rollbacks (Redis forgot them)",
        f"detected {sum(detected)} times ({'/'.join(map(str, detected))} per replica)",
        f"the {survivors['acknowledged_rounds']} others: **{survivors['lost']} lost, "
        f"{survivors['duplicated']} duplicated**, replicas bit-identical: "
        f"{survivors['replicas_agree_on_probes']}, state == serial replay of the surviving log: "
        f"{survivors['state_equals_replay']}",
        f"**{r['status_5xx_other_than_503']} 5xx**",
    ]))]


def _failover_rows(results: dict[str, Any]) -> Rows:
    if "failover_wait" not in results:
        return [("Failover", "**not measured in this run**")]
    rows = []
    for key, title in (("failover_wait", "Failover, waiting for 1 replica"),
                       ("failover_no_wait", "Failover, not waiting")):
        r = results[key]
        rows.append((title, f"{r['acknowledged_rounds']} acknowledged ({r['acknowledged_during_lag']} "
                     f"while the replica lagged): **{r['lost']} lost**, {r['duplicated']} duplicated, "
                     f"{r['status_503']} answers 503, rollbacks reported {r['rollbacks_reported']}; replicas "
                     f"bit-identical: {r['replicas_agree_on_probes']}, state == serial replay: "
                     f"{r['state_equals_replay']}; promotion took {r['failover_s']} s, longest time without "
                     f"an acknowledgement {r['longest_ack_gap_s']} s"))
    return rows


def _eviction_rows(r: dict[str, Any]) -> Rows:
    ready = r["readiness_when_policy_changes"]
    over, kept = r["override_allkeys_lru"], r["noeviction"]
    return [
        ("Evicting Redis refused",
         f"start on `allkeys-lru`: refused {r['refused_to_start']}; policy changed at run time: /readyz "
         f"{ready['status']} `{ready['code']}`, {ready['status_after_policy_restored']} once restored"),
        ("Evicting Redis with the override",
         f"{over['learners']} learners, {over['acknowledged_rounds']} rounds acknowledged under a "
         f"{over['maxmemory_bytes'] / 2**20:.1f} MiB cap: **{over['learners_gone']} learners and "
         f"{over['acknowledged_rounds_gone']} acknowledged rounds vanished** ({over['evicted_keys']} keys "
         f"evicted; answers {_counts(over['feedback_statuses'])})"),
        ("Full Redis on `noeviction`",
         f"same load: {kept['acknowledged_rounds']} acknowledged, **{kept['learners_gone']} learners and "
         f"{kept['acknowledged_rounds_gone']} acknowledged rounds vanished**; answers "
         f"{_counts(kept['feedback_statuses'])}"),
    ]


def _counts(statuses: dict[str, int]) -> str:
    return ", ".join(f"{n} x {s}" for s, n in statuses.items())


def _hostile_row(r: dict[str, Any]) -> Rows:
    if r.get("exit"):
        return [("Hostile senders", f"**the measurement failed** (exit {r['exit']})")]
    idle = r["phases"]["idle"]["p99 ms"]
    cells = [f"{name}: p50 {p['p50 ms']} ms, p99 {p['p99 ms']} ms"
             + ("" if name == "idle" else f" ({p['p99 ms'] / idle:.1f} x idle p99"
                # (runs since the per-round verdict: the worst round against its adjacent idle rounds)
                + (f"; worst round {p['worst round']}" if "worst round" in p else "") + ")")
             for name, p in r["phases"].items()]
    return [("Hostile senders (victim's predicts)", "; ".join(cells))]


def _statuses(phase: dict[str, Any]) -> str:
    counts = phase["statuses_of_requests_sent_meanwhile"]
    shown = [f"{n} x {'transport error' if k == '0' else k}" for k, n in sorted(counts.items())]
    return ", ".join(shown) or "none"


def _sigkill_row(r: dict[str, Any]) -> Rows:
    return [("Redis SIGKILL (appendfsync everysec)",
             f"{r['acknowledged_rounds']} acknowledged, **{r['lost']} lost, {r['duplicated']} duplicated** "
             "(a process kill: written AOF data survives in the page cache)")]


_FSYNC_TABLE = markdown_table(
    ["Redis `appendfsync`", "service process crash", "Redis process crash", "host crash or power loss"], [
        ("`always`", "survives", "survives",
         "survives: Redis flushes the append-only file to disk (fsync) before it sends the replies of the "
         "commands it just ran (as far as the disk honours fsync)"),
        ("`everysec` (compose, the embedded server, this battery)", "survives",
         "survives: Redis writes the command to the file (into the operating system's cache) before "
         "replying, unless a slow disk is still busy with the previous fsync; it then holds that write back "
         "for up to 2 s (measured below: Redis SIGKILL)",
         "can lose about the last second of acknowledged rounds (up to about two when the disk is slow: "
         "Redis then postpones writes rather than fall further behind)"),
        ("`no`", "survives", "survives: the command is written to the file before the reply",
         "can lose whatever the operating system had not yet written, often tens of seconds on Linux"),
    ])

_PROMISES = """## What each durability setting promises

A feedback is *acknowledged* when the service answers 2xx. It answers only after the script that appends
the round to the learner's log in Redis has run, so an acknowledged round is in Redis's memory; whether it
survives a crash then depends on how Redis is run. What an acknowledged round survives:

{fsync_table}

Without `appendonly yes` (snapshots only) a Redis crash loses everything since the last RDB save. The service
never depends on more than Redis promises: a round is acknowledged once, and a retry with the same
`request_id` is answered from Redis's record of it, not applied twice.

**Replication and failover.** Redis replicates asynchronously: the primary answers before its replicas
have the write. A failover promotes a replica that may lack the newest acknowledged rounds; for the service
that is a rollback (below): those rounds are gone. `KONS_REDIS_WAIT_REPLICAS=N` makes the service
acknowledge a feedback only after Redis's `WAIT` reports that N replicas received it (else, after
`KONS_REDIS_WAIT_TIMEOUT_MS`, 503 `not_replicated`, and a retry with the same `request_id` waits again).
Redis's own documentation is explicit that `WAIT` narrows the window but is not a guarantee: Sentinel and
Cluster promote the best replica they can find, on a best-effort basis, and `WAIT` confirms that a replica
received the write, not that it wrote it to disk (Redis 7.2's `WAITAOF` does that).

**`maxmemory-policy noeviction` is required.** Any other policy lets Redis delete keys when memory runs
short, without an error: learners, their logs and the request-id records that make retries safe. The
service refuses to start on such a Redis. A policy switched at run time is seen within
`KONS_EVICTION_CHECK_SECONDS` (2 s; at once after an OOM reply, `kons_service/core/eviction.py`): from then
on, feedback, creates and state uploads are refused with 503 `store_may_evict` and `Retry-After` before
anything is written, one log line says so (and one when the policy is back), `kons_store_may_evict` is 1,
`kons_writes_refused_store_may_evict_total` counts the refusals, and `/readyz` answers 503 too. What it
cannot see: keys evicted between the switch and the next check. `KONS_REDIS_REQUIRE_NOEVICTION=false`
overrides both checks, for a managed Redis that hides `CONFIG` and is known to be `noeviction`. On
`noeviction` a full Redis refuses writes: feedback is answered 503, `/readyz` answers 503 `store_full`,
and nothing acknowledged is lost (measured below: Evicting Redis).

**The lease TTL (`KONS_LEASE_TTL_MS`, default 2000).** One process writes to a learner at a time, under a
lease it renews while it works. If that process dies, Redis sees its connections close, and the next
writer takes the lease over at once (`KONS_LEASE_TAKEOVER`, default on: each process names its Redis
connections, and a holder with none is gone: tens of milliseconds after a SIGKILL, see
`benchmarks/results/takeover.md`). Only when Redis cannot tell (a vanished host whose sockets are still
open, a Redis that refuses `CLIENT LIST`) do other processes wait for the lease to expire, at most the
TTL. The write stall after a SIGKILL measured below is mostly the killed process's restart. Requests wait
up to `KONS_LEASE_WAIT_SECONDS` (default 10) for the lease before they are answered 503 `learner_busy`.
Correctness does not rest on the lease: every append is checked against the log's head in Redis.

**The history fence (after a rollback).** Every logged round names the round before it, so a process can
tell whether the log in Redis continues the history it holds. After Redis lost acknowledged rounds and took
others at the same versions (a host crash under `everysec`, a failover), a process that held the lost rounds
logs `the store lost rounds of <learner>: it was at version ...` and rebuilds the learner from Redis before it
answers; it never serves or extends the lost history, and every process agrees with a replay of the log
(measured below: Redis rollback). The fence cannot bring the lost rounds back: their clients were told they
were applied, and their request ids were lost with them (a retry is applied as a new round). Only
`appendfsync always` on the primary, and waiting for replicas before acknowledging, narrow that loss.

**Rollbacks no process held (restarts, other replicas): marks and the client's version.** The fence sees a
loss only in a process that still holds the lost rounds in memory. A host reboot restarts the service with
Redis, and another replica never held them: both would go on silently. Two witnesses Redis cannot roll back
report it then; each names the versions lost (a lower bound), logs `the store lost rounds of <learner>
that <witness>: ...; lost at least versions F to L (N rounds)` once per loss per process, counts in
`kons_rollbacks_detected_total{seen_by="process"|"marks"|"client"}` (the fence's too) and its rounds in
`kons_rollback_rounds_lost_total`, and `/readyz` shows the process's totals (`"rollbacks": {"detected",
"rounds_lost"}`, no learner named). Answers are unchanged.

* *Marks* (`KONS_ACK_MARKS_DIR`, off by default): each process appends the newest acknowledged version
  of each learner to a file of its own in a local directory before it answers, and `fsync`s it every
  `KONS_ACK_MARKS_FSYNC_SECONDS` (0.1) in the background. A process that starts reads the directory (its
  predecessors' files, which it folds into its own, and those of live processes sharing it) and, the
  first time it loads a learner, compares the newest mark of the learner's incarnation with the store's
  head (`kons_service/core/marks.py`). Cost: a `write` of one line per acknowledged group, 4.7 µs
  (`benchmarks/results/ack_marks.md`, load 6) against a feedback of 1.25-1.3 ms median here; side by side,
  4 x 2,000 feedbacks each, the medians with marks were 1.01-1.02x those without (1.00-1.04x in an earlier
  run). An `fsync` per acknowledgement would cost 0.1 ms here (median; 0.17 ms and, on a busier machine,
  3.9 ms in earlier runs), hence the batches. What the
  marks cannot see: a host crash loses the marks of the last `fsync` period (Redis under `everysec`
  loses about a second: most of it is seen); a process on another host, or after its directory is
  lost; a loss the log no longer shows (the store took other rounds past the mark and trimmed the log
  behind a snapshot).
* *The client's version*: a client may send back the newest version it was answered, in the header
  `Kons-Seen-Version` of a predict, a feedback or a `GET` of the learner, or of a V2 infer, model metadata
  or ready request (the Python client does it by itself). A store whose head is below it lost at least the
  versions after the head up to it; this reaches a replica that never held the rounds and needs no local
  state. What it cannot see: a loss no client comes back with a version of; a loss the store has already
  overtaken when the version comes back (others appended past it); more than the client saw. It trusts the
  client only where the store cannot prove it lost nothing: a version above the head counts only if the
  Redis holding the learner has restarted or a replica taken over since the learner was created (`INFO`:
  uptime, `master_replid2`); otherwise nothing was ever lost and the header is logged (info) and counted
  nowhere, whatever number a client sends. After such a restart a version from before a delete, a
  re-create or a state upload of the learner is reported as a loss (clients must forget it then, as the
  Python client does).

Measured below: Redis rollback across a restart.

""".replace("{fsync_table}", "\n".join(_FSYNC_TABLE))


_NOTES = """## How to read these figures

* **Acknowledged** means a 2xx was received (see above for what it survives). The `redis_sigkill` row kills
  only the Redis process, whose written data survives in the page cache; a host crash is not simulated.
* **Retry-safety**: feedback takes an optional `request_id` (1-128 of `[A-Za-z0-9_.:-]`, one per request,
  covering a whole batch). A retry with the same id returns the original predictions, losses and
  version and changes nothing; the same id with another body is a 409. Ids are remembered in Redis for
  `KONS_REQUEST_ID_TTL_SECONDS` (default 3600): a retry later than that is a new request. Their answers
  are kept at most `KONS_REQUEST_IDS_MAX` (default 10000) per learner and within the learner's share of
  the tenant's byte budget, oldest first out: a retry whose answer went is a 409 `already_applied`,
  never applied again. Requests without an id get a
  private one for 60 s so that redis-py re-sending the append script after a lost reply cannot apply a
  round twice (see `tests/reliability/test_retry_safety.py`).
* **503 under Redis faults**: while Redis is down every request that needs it answers 503 with
  `Retry-After: 1` (`store_unavailable`, or `learner_busy` for a request that waited too long behind
  others for its learner). A frozen Redis costs the most time: a request waits at most
  `KONS_LEASE_WAIT_SECONDS` for its learner's lock in the process, then at most redis-py's 3 attempts of
  `KONS_REDIS_TIMEOUT_SECONDS` for each of at most two Redis calls (the failing one, then the lease
  release); the row above gives the bound with the settings of the run. The service reconnects by itself.
* **Can these checks fail?** With the request_id check removed from `append.lua` (a mutation run on a
  copy of the tree), the retry-safety tests fail, and the Redis-fault storm counted 5 duplicated rounds.
  The SIGKILL storm alone seldom kills a process between its append and its answer (its in-flight
  requests mostly died before the append); that window is covered deterministically by the lost-reply
  tests in `tests/reliability/test_retry_safety.py`, which drop the reply of the append script in a proxy.
  Run against the service as it was before the history fence (the parent of commit cba4bee), the
  rollback scenario ends with the replicas different from each other and from the serial replay.
* **Rollbacks reported with `WAIT` and none lost**: a round the old primary logged but no replica
  confirmed was answered 503 `not_replicated`, so it was never acknowledged; a failover loses it, and a
  process that held it reports that rollback all the same (the cluster runs' `rollbacks_reported`).
* **Byte format**: random corruption of state blobs is covered by the hypothesis tests in
  `tests/kons/test_state.py` (`test_random_corruption_is_always_a_state_format_error`,
  `test_resigned_corruption_never_escapes_as_another_error`) and over HTTP by
  `tests/reliability/test_numerics.py`.
"""


async def _battery(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    big = not args.quick
    results: dict[str, Any] = {}
    steps: list[tuple[str, Callable[[], Awaitable[dict[str, Any]]]]] = [
        ("crash", lambda: crash_scenario(workdir / "crash", kills=args.kills if big else 5, clients=4)),
        ("redis_faults", lambda: redis_fault_scenario(workdir / "faults", outage_seconds=5 if big else 2,
                                                      pause_seconds=5 if big else 2)),
        ("redis_sigkill", lambda: redis_fault_scenario(workdir / "sigkill", kill_redis=True,
                                                       outage_seconds=1, pause_seconds=1)),
        ("replicas", lambda: replica_scenario(workdir / "replicas", replicas=3 if big else 2,
                                              seconds=30 if big else 5)),
        ("rollback", lambda: rollback_scenario(workdir / "rollback", rollbacks=6 if big else 2)),
        ("rollback_restart", lambda: restart_rollback_scenario(workdir / "rollback_restart",
                                                               trials=3 if big else 2)),
        ("rollback_restart_marks", lambda: restart_rollback_scenario(
            workdir / "rollback_restart_marks", trials=3 if big else 2, marks=True)),
        ("eviction", lambda: eviction_scenario(workdir / "eviction", learners=60 if big else 12,
                                               batches=20 if big else 8)),
        ("hostile", lambda: asyncio.to_thread(_hostile, 6.0 if big else 2.0)),
        ("soak", lambda: soak_scenario(workdir / "soak", seconds=args.soak_seconds if big else 20)),
    ]
    steps += _failover_steps(workdir)
    steps.append(("cluster", lambda: cluster_failover.run(workdir / "cluster", kills=10 if big else 3,
                                                          replica_seconds=10 if big else 4, seeds=1,
                                                          pairs=False)))
    for name, run in steps:
        t0 = time.monotonic()
        print(f"[{time.strftime('%H:%M:%S')}] {name} ...", flush=True)
        results[name] = await run()
        shown = {k: v for k, v in results[name].items() if k not in ("rss_series", "phases")}
        print(f"  {round(time.monotonic() - t0)} s: {json.dumps(shown)}", flush=True)
    print(f"[{time.strftime('%H:%M:%S')}] fuzz ...", flush=True)
    results["fuzz"] = await asyncio.to_thread(_fuzz, workdir, args.fuzz_examples if big else 20)
    print(f"  {json.dumps(results['fuzz'])}", flush=True)
    return results


def _redis_version() -> str:
    out = subprocess.run([redis_server_binary(), "--version"], capture_output=True, text=True, check=False)
    words = out.stdout.split()
    version = next((w[2:] for w in words if w.startswith("v=")), "?")
    return f"redis-server {version}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the Markdown report here (e.g. docs/reliability.md)")
    parser.add_argument("--json", type=Path, help="write the raw figures here")
    parser.add_argument("--from-json", type=Path, help="re-render the report from figures saved by --json")
    parser.add_argument("--cluster-json", type=Path,
                        help="take the cluster figures from a run of python -m benchmarks.cluster_failover "
                        "--json (it takes 14 min on its own), with that run's command")
    parser.add_argument("--quick", action="store_true", help="small numbers (a smoke run)")
    parser.add_argument("--kills", type=int, default=25)
    parser.add_argument("--soak-seconds", type=float, default=180.0)
    parser.add_argument("--fuzz-examples", type=int, default=150)
    args = parser.parse_args(argv)
    if args.from_json:
        results = json.loads(args.from_json.read_text())
    else:
        started = time.monotonic()
        stamp = provenance(registry.sources_of("reliability.json") or ())  # the code imported now runs
        with tempfile.TemporaryDirectory(prefix="kons-reliability-") as tmp:
            results = stamp_json(asyncio.run(_battery(args, Path(tmp))), stamp)
        command = command_line("benchmarks.reliability", argv, outputs=("--json", "--from-json"))
        results["run"] = {"seconds": round(time.monotonic() - started, 1), "command": command,
                          "machine": machine_summary(),
                          "redis": _redis_version()}
    if args.cluster_json:
        results["cluster"] = json.loads(args.cluster_json.read_text())
    failures = _failures(results)
    verdict = "FAILED: " + "; ".join(failures) if failures else "all promises kept"
    print(f"done in {results['run']['seconds'] / 60:.1f} min; {verdict}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(_markdown(results, results["run"]["command"], results["run"]["seconds"]))
    return 1 if failures else 0


def _failures(results: dict[str, Any]) -> list[str]:
    out = []
    for name in ("crash", "redis_faults", "replicas"):
        out += _storm_failures(name, results[name])
    fuzz = results.get("fuzz", {})
    if fuzz.get("server_errors") or fuzz.get("schema_violations") or fuzz.get("pytest_exit"):
        out.append(f"fuzz: {fuzz}")
    with contextlib.suppress(KeyError):
        if results["redis_sigkill"]["lost"]:
            out.append(f"redis_sigkill.lost={results['redis_sigkill']['lost']} (appendfsync everysec)")
    return (out + _if_run(results, "rollback", _rollback_failures)
            + _if_run(results, "eviction", _eviction_failures) + _failover_failures(results)
            + _if_run(results, "hostile", _hostile_failures)
            + _if_run(results, "rollback_restart", _restart_rollback_failures)
            + _if_run(results, "rollback_restart_marks", _restart_rollback_failures)
            + _if_run(results, "cluster", cluster_failover.failures))


def _storm_failures(name: str, r: dict[str, Any], audited: str = "", lost_allowed: bool = False) -> list[str]:
    """What a storm's figures show broken: counts that must be 0, a state that must equal the serial
    replay. ``audited`` prefixes the audit's figures (the rollback audits its surviving rounds)."""
    audit_zeros = [audited + key for key in ("lost", "duplicated", "log_mismatches")
                   if not (lost_allowed and key == "lost")]
    zeros = [*audit_zeros, "unresolved", "status_5xx_other_than_503", "inconsistent_retries"]
    out = [f"{name}.{key}={r[key]}" for key in zeros if r[key]]
    if not (r[audited + "state_equals_replay"] and r[audited + "replicas_agree_on_probes"]):
        out.append(f"{name}: the state differs from the serial replay")
    return out


def _failover_failures(results: dict[str, Any]) -> list[str]:
    """With WAIT nothing acknowledged is lost; without it rounds may be lost, but must be reported."""
    out = []
    for key in ("failover_wait", "failover_no_wait"):
        if key in results:
            r = results[key]
            out += _storm_failures(key, r, lost_allowed=key == "failover_no_wait")
            if r["lost"] and not r["rollbacks_reported"]:
                out.append(f"{key}: rounds were lost and no replica reported it")
    return out


def _restart_rollback_failures(r: dict[str, Any]) -> list[str]:
    if r["reported_with_the_right_extent"] == r["reports_expected"]:
        return []
    return [f"rollback_restart (marks: {r['marks']}): reported with the right extent "
            f"{r['reported_with_the_right_extent']} of {r['reports_expected']} times"]


def _rollback_failures(r: dict[str, Any]) -> list[str]:
    out = _storm_failures("rollback", r, audited="survivors_")
    if r["survivors_at_another_version"]:
        out.append(f"rollback.survivors_at_another_version={r['survivors_at_another_version']}")
    if r["lost_by_the_rollbacks"] and not sum(r["rollbacks_detected_per_replica"]):
        out.append("rollback: rounds were lost and no replica reported it")
    return out


def _eviction_failures(r: dict[str, Any]) -> list[str]:
    out = []
    if not r["refused_to_start"]:
        out.append("eviction: the service started on an allkeys-lru Redis")
    if r["readiness_when_policy_changes"]["code"] != "store_may_evict":
        out.append(f"eviction: /readyz {r['readiness_when_policy_changes']}")
    kept = r["noeviction"]
    if kept["acknowledged_rounds_gone"] or kept["learners_gone"]:
        out.append(f"eviction: noeviction lost {kept['acknowledged_rounds_gone']} acknowledged rounds")
    if any(s.startswith("5") and s != "503" for s in kept["feedback_statuses"]):
        out.append(f"eviction: a full noeviction Redis gave {kept['feedback_statuses']}")
    return out


def _hostile_failures(r: dict[str, Any]) -> list[str]:
    """The victim's p99 under hostile senders must stay within 3 x its idle p99 (issue 14), in every
    round against the idle rounds next to it (issue 21; pooled for runs before the per-round figures)."""
    if r.get("exit"):
        return [f"hostile: the measurement failed: {r.get('error', '')[-300:]}"]
    if "rounds_p99_over_adjacent_idle" in r:
        return [f"hostile: {name} round {i + 1} p99 = {ratio:.1f} x the adjacent idle p99"
                for name, ratios in r["rounds_p99_over_adjacent_idle"].items()
                for i, ratio in enumerate(ratios) if ratio > 3]
    idle = r["phases"]["idle"]["p99 ms"]
    return [f"hostile: {name} p99 {p['p99 ms']} ms = {p['p99 ms'] / idle:.1f} x idle"
            for name, p in r["phases"].items() if p["p99 ms"] > 3 * idle]


if __name__ == "__main__":
    raise SystemExit(main())
