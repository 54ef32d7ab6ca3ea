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
              seeds: int = 3) -> dict[str, Any]:
    """Every scenario once (the failovers ``seeds`` times each: their losses vary from run to run)."""
    results: dict[str, Any] = {
        "cluster_crash": await crash_scenario(workdir / "crash", kills=kills, clients=4, cluster=True),
        "cluster_replicas": await replica_scenario(workdir / "replicas", replicas=3, clients=6,
                                                   seconds=replica_seconds, cluster=True),
    }
    for seed in range(seeds):
        for wait in (True, False):
            name = f"pair_failover_{'wait' if wait else 'no_wait'}"
            results.setdefault(name, []).append(
                await failover_scenario(workdir / f"{name}{seed}", wait=wait, seed=seed))
        results.setdefault("cluster_failover_wait", []).append(
            await cluster_failover_scenario(workdir / f"cluster_failover{seed}", wait=True, seed=seed))
    return results


_COLUMNS = ("acknowledged", "lost", "duplicated", "rollbacks_reported", "status_503", "state_equals_replay",
            "replicas_agree_on_probes", "longest_ack_gap_s", "seconds")


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
