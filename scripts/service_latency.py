"""Latency of the service's predict and feedback at a few learner sizes, over HTTP on loopback.

    python scripts/service_latency.py [--sizes 1000 10000] [--requests 200]

Starts a private redis-server (random port, temporary directory) and the app under uvicorn in a
thread of this process, builds each learner with kons in-process and uploads it with PUT /state, then
times sequential requests from one keep-alive httpx client (so the numbers include HTTP, JSON, auth,
the Redis round trips and the kons round; the client runs in the same process and shares the GIL).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import tempfile
import threading
import time

import httpx
import numpy as np
import uvicorn

import kons
from kons_service.main import create_app
from kons_service.settings import Settings
from kons_service.store.embedded import redis_server_binary

SPECS = {
    "kernel_ogd": {"kernel": {"name": "rbf", "gamma": 0.1}, "loss": "squared", "eta": 0.5, "C": 3.0},
    "sketched_kons": {"kernel": {"name": "rbf", "gamma": 0.1}, "loss": "squared", "alpha": 1.0, "eta": 0.1,
                      "C": 3.0, "beta": 0.2, "seed": 0},
}
DIM = 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _percentiles(samples: list[float]) -> str:
    ms = sorted(1000 * s for s in samples)
    return f"p50 {statistics.median(ms):6.2f} ms  p90 {ms[int(0.9 * len(ms))]:6.2f} ms  max {ms[-1]:6.2f} ms"


def _time(fn, n: int) -> list[float]:
    out = []
    for i in range(n):
        start = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="kons-latency-")
    redis_port, port = _free_port(), _free_port()
    redis_proc = subprocess.Popen(
        [redis_server_binary(), "--port", str(redis_port), "--bind", "127.0.0.1", "--dir", workdir,
         "--appendonly", "yes", "--appendfsync", "everysec", "--save", ""], stdout=subprocess.DEVNULL)
    settings = Settings(redis_url=f"redis://127.0.0.1:{redis_port}/0", log_level="warning")
    config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    try:
        time.sleep(0.3)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        rng = np.random.default_rng(0)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            for algorithm, params in SPECS.items():
                for size in args.sizes:
                    X = rng.normal(size=(size, DIM))
                    Y = np.sin(X[:, 0])
                    learner = kons.learner_from_params(algorithm, {**params, "dim": DIM})
                    learner.learn_many(X, Y)
                    name = f"{algorithm}-{size}"
                    spec = {"algorithm": algorithm, "dim": DIM, "params": params}
                    http.put(f"/v1/learners/{name}", json=spec).raise_for_status()
                    blob = learner.to_bytes()
                    http.put(f"/v1/learners/{name}/state", content=blob,
                             headers={"content-type": "application/octet-stream"}).raise_for_status()
                    probes = rng.normal(size=(args.requests, DIM)).tolist()
                    url = f"/v1/learners/{name}"
                    http.post(f"{url}/predict", json={"x": probes[0]}).raise_for_status()  # warm the cache
                    predict = _time(lambda i, url=url, probes=probes: http.post(
                        f"{url}/predict", json={"x": probes[i]}).raise_for_status(), args.requests)
                    feedback = _time(lambda i, url=url, probes=probes: http.post(
                        f"{url}/feedback", json={"x": probes[i], "y": 0.5}).raise_for_status(), args.requests)
                    stored = http.get(url).json()["stats"]["stored_points"]
                    print(f"{algorithm:14s} stored {stored:6d} state {len(blob) / 2**20:6.2f} MiB")
                    print(f"    predict   {_percentiles(predict)}")
                    print(f"    feedback  {_percentiles(feedback)}")
    finally:
        server.should_exit = True
        thread.join(30)
        redis_proc.terminate()
        redis_proc.wait(30)


if __name__ == "__main__":
    main()
