"""Redis Cluster and failover: the storms of the reliability battery on a real Redis Cluster, real failures
of the shard serving the learner with and without acknowledgements that wait for a replica, and
failovers of a primary + replica pair.

The scenarios are in :mod:`testkit.scenarios` (``crash_scenario`` and ``replica_scenario`` with
``cluster=True``, ``cluster_outage_scenario``, ``failover_scenario``); ``tests/reliability/test_storms.py``
and ``tests/reliability/test_cluster_outages.py`` run them with small numbers. This command runs them with
bigger ones and prints the section of ``docs/reliability.md`` that shows them, every run on its own row::

    python -m benchmarks.cluster_failover --json benchmarks/results/cluster_failover.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import command_line, git_commit, machine_summary, markdown_table
from benchmarks.provenance import provenance, stamp_json
from testkit.scenarios import (
    CLUSTER_OUTAGES,
    cluster_outage_scenario,
    crash_scenario,
    failover_scenario,
    replica_scenario,
)

__all__ = ["SOURCES", "failures", "main", "markdown", "run"]

#: What these figures measure (for their provenance).
SOURCES = ("kons_service", "testkit/processes.py", "testkit/scenarios.py", "benchmarks/cluster_failover.py")

#: How long the node of a killed primary stays down after its replica's promotion in the ``late_rejoin``
#: runs: with ``WAIT`` the shard takes no writes until a replica is back.
_LATE_REJOIN_S = 5.0


async def run(workdir: Path, *, kills: int = 10, replica_seconds: float = 10.0,
              seeds: int = 3, pairs: bool = True) -> dict[str, Any]:
    """The cluster storms once, then ``seeds`` runs of each real failure of the learner's shard with and
    without ``WAIT`` (their figures vary from run to run). The reliability battery, which fails a primary +
    replica pair over on its own, passes ``pairs=False``."""
    results: dict[str, Any] = {
        "cluster_crash": await crash_scenario(workdir / "crash", kills=kills, clients=4, cluster=True),
        "cluster_replicas": await replica_scenario(workdir / "replicas", replicas=3, clients=6,
                                                   seconds=replica_seconds, cluster=True),
    }
    outages = [(outage, 0.0) for outage in CLUSTER_OUTAGES] + [("killed_primary", _LATE_REJOIN_S)]
    for seed in range(seeds):
        for wait in (True, False) if pairs else ():
            name = f"pair_failover_{'wait' if wait else 'no_wait'}"
            results.setdefault(name, []).append(
                await failover_scenario(workdir / f"{name}{seed}", wait=wait, seed=seed))
        for outage, rejoin_after in outages:
            for wait in (False, True):
                label = _label(outage, rejoin_after, wait)
                results.setdefault("cluster_outages", []).append({"scenario": label, "seed": seed, **(
                    await cluster_outage_scenario(workdir / f"{label}{seed}", outage=outage, wait=wait,
                                                  rejoin_after_s=rejoin_after, seed=seed))})
    return results


def _label(outage: str, rejoin_after: float, wait: bool) -> str:
    late = f"_node_back_after_{rejoin_after:g}s" if rejoin_after else ""
    return f"{outage}{late}_{'wait' if wait else 'no_wait'}"


def failures(results: dict[str, Any]) -> list[str]:
    """The promises a run broke: a 500, a 503 without ``Retry-After``, a background task that died (a
    traceback in a service log), a state unlike the serial replay, or a round lost with ``WAIT``."""
    out = []
    for r in results.get("cluster_outages", []):
        where = f"cluster {r['scenario']} (seed {r['seed']})"
        broken = {"500 answers": r["status_5xx_other_than_503"], "503s without Retry-After":
                  r["retry_after_missing"], "tracebacks in the service logs": r["service_log_tracebacks"],
                  "acknowledged rounds lost with WAIT": r["lost"] if r["wait_replicas"] else 0,
                  "duplicated rounds": r["duplicated"], "state unlike the serial replay":
                  not r["state_equals_replay"]}
        out += [f"{where}: {int(n)} {what}" for what, n in broken.items() if n]
    return out


_COLUMNS = ("acknowledged", "lost", "duplicated", "rollbacks_reported", "status_503", "state_equals_replay",
            "replicas_agree_on_probes", "longest_ack_gap_s", "seconds")

_OUTAGE_COLUMNS = ("scenario", "seed", "acknowledged", "acknowledged_during_lag", "lost", "duplicated",
                   "promote_s", "writes_resumed_s", "rejoined_s", "status_503", "codes_503", "status_500",
                   "retry_after_missing", "service_log_tracebacks", "rollbacks_reported",
                   "state_equals_replay")


_SCENARIOS = """\
* **Cluster storms**: a real Redis Cluster of 3 primaries on loopback (`redis-server --cluster-enabled yes`,
  slots assigned by `redis-cli --cluster create`), the service on `redis+cluster://`. The SIGKILL storm
  of the service and the storm through 3 service processes are audited like the storms above.
* **Real failures of the learner's shard** (`cluster_outages`): a storm of 4 clients through 2 service
  processes on a cluster of 3 primaries with one replica each (`cluster-node-timeout` 1000 ms), while
  the shard serving the learner fails; nothing forces a takeover: Redis Cluster detects the failure and
  elects the replica itself.
  * `killed_primary`: the primary is SIGKILLed; once its replica is promoted the node restarts at once
    and rejoins as a replica (`..._node_back_after_5s`: it stays down 5 s longer, the shard without a
    replica meanwhile);
  * `lagging_replica`: the replica is frozen (SIGSTOP) and its replication link dropped for 1.5 s while
    the primary acknowledges, then the primary is SIGKILLed and the replica thawed and promoted with what
    it has (the link is dropped because a SIGKILLed process's socket buffers still reach a replica on
    loopback, where a crashed host's would not: with the SIGKILL alone the replica lost nothing);
  * `shard_down`: the primary and its replica are both SIGKILLed, for 3 s, then both restart from their
    append-only files.

  `promote_s`: from the kill until the replica says it is primary; `writes_resumed_s`: until the first
  acknowledgement of a request sent after the kill; `rejoined_s`: until the cluster is settled again with
  the restarted node in sync. `status_500` must be 0 and every 503 must carry `Retry-After`
  (`retry_after_missing`); `service_log_tracebacks` counts the tracebacks of the service processes' logs
  (a background task that dies of a store error logs one).
* **Pair failover** (`pair_failover_*`; the reliability battery runs it as its two Failover sections):
  2 service processes on a primary and one replica behind a movable endpoint (the model of a managed
  Redis's primary endpoint). Mid-storm the replication link is cut for 1.5 s, then the primary's host is
  lost (SIGKILL), the replica is promoted (`REPLICAOF NO ONE`), the endpoint moves to it, and the old
  host rejoins as its replica.

With `KONS_REDIS_WAIT_REPLICAS=1` (and `KONS_REDIS_WAIT_TIMEOUT_MS=250`) no acknowledged round may be
lost: while no replica confirms a write, feedback is answered 503 `not_replicated` and clients retry with
the same `request_id`. That is also its cost: a shard whose only replica was promoted takes no
acknowledged write until a replica is back. Without it, the rounds acknowledged while the replica lagged
are lost with the old primary, as Redis's asynchronous replication allows, but never served afterwards:
each process holding them reports the rollback and rebuilds, the processes agree, and the state equals a
serial replay of the surviving log. "lost" counts acknowledged rounds with no version of their own in
the final log, "duplicated" versions that no acknowledgement claims.
"""


def _cell(value: Any) -> Any:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items()) or "-"
    return "-" if value is None else value


def _spread(runs: list[dict[str, Any]], key: str) -> str:
    values = [r[key] for r in runs if r.get(key) is not None]
    if not values:
        return "-"
    low, high = min(values), max(values)
    return f"{low:g}" if low == high else f"{low:g}-{high:g} (median {statistics.median(values):g})"


def _outage_summary(runs: list[dict[str, Any]]) -> list[str]:
    by_label: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_label.setdefault(r["scenario"], []).append(r)
    rows = [[label, len(group), _spread(group, "promote_s"), _spread(group, "writes_resumed_s"),
             _spread(group, "lost"), sum(r["status_5xx_other_than_503"] for r in group),
             sum(r["retry_after_missing"] for r in group)]
            for label, group in by_label.items()]
    return markdown_table(["scenario", "runs", "promote_s", "writes_resumed_s", "lost", "5xx other than 503",
                           "503 without Retry-After"], rows, "lrrrrrr")


def markdown(results: dict[str, Any], command: str) -> str:
    """The "Redis Cluster and failover" section of ``docs/reliability.md``."""
    rows = []
    for name, runs in results.items():
        if name in ("run", "cluster_outages", "provenance"):
            continue
        for r in runs if isinstance(runs, list) else [runs]:
            rows.append([name, *(r.get(column, "") for column in _COLUMNS)])
    outages = results.get("cluster_outages", [])
    commit = results["run"].get("commit", "unknown")
    load = results["run"].get("load")
    machine = results["run"].get("machine") or machine_summary()  # (runs before it was recorded: here)
    loaded = f", load average {load[0]} at the start and {load[1]} at the end" if load else ""
    lines = [
        "## Redis Cluster and failover",
        "",
        f"Reproduce with `{command}` (commit {commit}; machine: {machine}, shared{loaded}; "
        f"{results['run']['seconds'] / 60:.1f} min).",
        "",
        _SCENARIOS,
        *markdown_table(["scenario", *_COLUMNS], rows, "l" + "r" * len(_COLUMNS)),
    ]
    if outages:
        lines += ["", "Real failures of the learner's shard, the spread over the runs:", "",
                  *_outage_summary(outages), "", "Every run:", "",
                  *markdown_table(list(_OUTAGE_COLUMNS), [[_cell(r.get(c)) for c in _OUTAGE_COLUMNS]
                                                          for r in outages], "l" + "r" * 15)]
        broken = failures(results)
        lines += ["", "**Not kept:** " + "; ".join(broken) + "." if broken else
                  "No 500, every 503 with `Retry-After`, no traceback, state == serial replay in every run."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the raw figures here")
    parser.add_argument("--markdown", type=Path, help="write the section of docs/reliability.md here too")
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args(argv)
    started = time.monotonic()
    stamp, commit = provenance(SOURCES), git_commit()
    load = [round(os.getloadavg()[0], 1)]  # the machine's 1-minute load average, at the start and the end
    with tempfile.TemporaryDirectory(prefix="kons-cluster-") as tmp:
        results = asyncio.run(run(Path(tmp), kills=args.kills, seeds=args.seeds))
    load.append(round(os.getloadavg()[0], 1))
    results["run"] = {"seconds": round(time.monotonic() - started, 1), "commit": commit, "load": load,
                      "machine": machine_summary(),
                      "command": command_line("benchmarks.cluster_failover", argv,
                                              outputs=("--json", "--markdown"))}
    if args.json:
        args.json.write_text(json.dumps(stamp_json(results, stamp), indent=2))
    text = markdown(results, results["run"]["command"])
    if args.markdown:
        args.markdown.write_text(text)
    print(text)
    return 1 if failures(results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
