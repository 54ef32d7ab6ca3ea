"""Redis Cluster and failover: the storms of the reliability battery on a real Redis Cluster, and
failovers mid-storm with and without acknowledgements that wait for a replica.

The scenarios are in :mod:`testkit.scenarios` (``crash_scenario`` and ``replica_scenario`` with
``cluster=True``, ``failover_scenario``, ``cluster_failover_scenario``); ``tests/reliability/test_storms.py``
runs them with small numbers. This command runs them with bigger ones and prints the section of
``docs/reliability.md`` that shows them::

    python -m benchmarks.cluster_failover --json benchmarks/results/cluster_failover.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import command_line, machine_summary, markdown_table
from testkit.scenarios import cluster_failover_scenario, crash_scenario, failover_scenario, replica_scenario

__all__ = ["main", "markdown", "run"]


async def run(workdir: Path, *, kills: int = 10, replica_seconds: float = 10.0,
              seeds: int = 3, pairs: bool = True) -> dict[str, Any]:
    """Every scenario once (the failovers ``seeds`` times each: their losses vary from run to run). The
    reliability battery, which fails a primary + replica pair over on its own, passes ``pairs=False``."""
    results: dict[str, Any] = {
        "cluster_crash": await crash_scenario(workdir / "crash", kills=kills, clients=4, cluster=True),
        "cluster_replicas": await replica_scenario(workdir / "replicas", replicas=3, clients=6,
                                                   seconds=replica_seconds, cluster=True),
    }
    for seed in range(seeds):
        for wait in (True, False) if pairs else ():
            name = f"pair_failover_{'wait' if wait else 'no_wait'}"
            results.setdefault(name, []).append(
                await failover_scenario(workdir / f"{name}{seed}", wait=wait, seed=seed))
        results.setdefault("cluster_failover_wait", []).append(
            await cluster_failover_scenario(workdir / f"cluster_failover{seed}", wait=True, seed=seed))
    return results


_COLUMNS = ("acknowledged", "lost", "duplicated", "rollbacks_reported", "status_503", "state_equals_replay",
            "replicas_agree_on_probes", "longest_ack_gap_s", "seconds")


_SCENARIOS = """\
* **Cluster**: a real Redis Cluster of 3 primaries on loopback (`redis-server --cluster-enabled yes`,
  slots assigned by `redis-cli --cluster create`), the service on `redis+cluster://`. The SIGKILL storm
  of the service and the storm through 3 service processes are audited like the storms above.
* **Pair failover** (`pair_failover_*`; the reliability battery runs it as its two Failover sections):
  2 service processes on a primary and one replica behind a
  movable endpoint (the model of a managed Redis's primary endpoint). Mid-storm the replication link is
  cut for 1.5 s, then the primary's host is lost (SIGKILL), the replica is promoted (`REPLICAOF NO ONE`),
  the endpoint moves to it, and the old host rejoins as its replica.
* **Cluster failover** (`cluster_failover_wait`): the same storm on a cluster whose primaries have a
  replica each; the primary serving the learner is SIGKILLed, its replica takes over (`CLUSTER FAILOVER
  TAKEOVER`), and the lost node comes back as a replica. No link cut here: it shows that the service
  follows the slot.

With `KONS_REDIS_WAIT_REPLICAS=1` (and `KONS_REDIS_WAIT_TIMEOUT_MS=250`) no acknowledged round may be
lost: while the link is cut, feedback is answered 503 `not_replicated` and clients retry with the same
`request_id`. Without it, the rounds acknowledged while the link was cut are lost with the old primary,
as Redis's asynchronous replication allows, but never served afterwards: each process holding them
reports the rollback and rebuilds, the processes agree, and the state equals a serial replay of the
surviving log. "lost" counts acknowledged rounds with no version of their own in the final log,
"duplicated" versions that no acknowledgement claims.
"""


def markdown(results: dict[str, Any], command: str) -> str:
    """The "Redis Cluster and failover" section of ``docs/reliability.md``."""
    rows = []
    for name, runs in results.items():
        if name == "run":
            continue
        for r in runs if isinstance(runs, list) else [runs]:
            rows.append([name, *(r.get(column, "") for column in _COLUMNS)])
    lines = [
        "## Redis Cluster and failover",
        "",
        f"Reproduce with `{command}` (machine: {machine_summary()}, shared; "
        f"{results['run']['seconds'] / 60:.1f} min).",
        "",
        _SCENARIOS,
        *markdown_table(["scenario", *_COLUMNS], rows, "l" + "r" * len(_COLUMNS)),
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the raw figures here")
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kons-cluster-") as tmp:
        results = asyncio.run(run(Path(tmp), kills=args.kills, seeds=args.seeds))
    results["run"] = {"seconds": round(time.monotonic() - started, 1),
                      "command": command_line("benchmarks.cluster_failover", argv, outputs=("--json",))}
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(markdown(results, results["run"]["command"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
