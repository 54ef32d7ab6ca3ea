"""The peer of the load benchmark: chantilly 0.3 (River behind Flask, state in Redis), run in its own venv.

Not imported by the project: ``benchmarks.load`` runs it with the interpreter of a throwaway venv
(``python -m venv /tmp/chantilly-venv && /tmp/chantilly-venv/bin/pip install 'chantilly==0.3.*' redis
'uvicorn[standard]'``), so chantilly's old pins never touch the project's environment.

    uvicorn --interface wsgi --factory benchmarks.chantilly_peer:create_app   # the server (+ /healthz)
    python -m benchmarks.chantilly_peer model                                 # dill bytes of the model
    python -m benchmarks.chantilly_peer count NAME                            # rounds the stored model took

chantilly reads ``STORAGE_BACKEND=redis``, ``REDIS_HOST``, ``REDIS_PORT`` and ``REDIS_DB`` from the
environment.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def create_app() -> Any:
    """chantilly's own Flask app, plus ``GET /healthz`` for the harness's readiness check."""
    import chantilly

    app = chantilly.create_app()
    app.add_url_rule("/healthz", "healthz", lambda: {"status": "ok"})
    return app


def model_bytes() -> bytes:
    """A River ``LinearRegression`` with its defaults, dilled as chantilly's ``POST /api/model`` wants it."""
    import dill
    from river import linear_model

    blob: bytes = dill.dumps(linear_model.LinearRegression())
    return blob


def count(name: str) -> dict[str, Any]:
    """How many ``learn_one`` calls the model stored under ``name`` has taken (its optimizer's counter)."""
    import dill
    import redis

    client = redis.Redis(host=os.environ["REDIS_HOST"], port=int(os.environ["REDIS_PORT"]),
                         db=int(os.environ["REDIS_DB"]))
    model = dill.loads(client.get(f"models/{name}"))
    return {"n_iterations": int(model.optimizer.n_iterations)}


def main(argv: list[str]) -> int:
    if argv[:1] == ["model"]:
        sys.stdout.buffer.write(model_bytes())
        return 0
    if len(argv) == 2 and argv[0] == "count":
        print(json.dumps(count(argv[1])))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
