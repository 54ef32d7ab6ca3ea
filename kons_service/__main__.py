"""``python -m kons_service [flags]``: serve the app with uvicorn, with the host, port and workers of the
settings; the same as ``kons serve [flags]`` (``--help`` lists the flags and starts nothing).

Without ``KONS_REDIS_URL`` the embedded Redis server is started here, once, and shared by the workers.
With several workers, their metrics go to a directory made fresh for this run (see
:mod:`kons_service.core.metrics`), removed on the way out.
"""

from __future__ import annotations

import logging.config
import os
import shutil
import signal
import sys
import tempfile
from types import FrameType

import uvicorn

from kons_service.http.logs import logging_config
from kons_service.settings import Settings
from kons_service.shutdown import CONNECTIONS_SECONDS
from kons_service.store.embedded import EmbeddedRedis


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    # uvicorn shuts down gracefully on SIGTERM/SIGINT, then re-raises the signal: turn it into SystemExit
    # so that the embedded Redis server is stopped (and its append-only file flushed) on the way out.
    sys.exit(128 + signum)


def main() -> None:
    settings = Settings()
    log_config = logging_config(settings.log_level, settings.log_format)
    logging.config.dictConfig(log_config)
    signal.signal(signal.SIGTERM, _exit_on_signal)
    embedded = None
    if settings.redis_url is None:
        embedded = EmbeddedRedis(settings.data_dir)
        os.environ["KONS_REDIS_URL"] = embedded.start()
    metrics_dir = None
    if settings.workers > 1:
        metrics_dir = tempfile.mkdtemp(prefix="kons-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir  # read by prometheus-client in each worker
    try:
        uvicorn.run("kons_service.main:app", host=settings.bind_host(), port=settings.port,
                    workers=settings.workers, log_level=settings.log_level, log_config=log_config,
                    access_log=False, timeout_graceful_shutdown=CONNECTIONS_SECONDS,
                    timeout_keep_alive=settings.keep_alive_seconds)
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)
        if embedded is not None:
            embedded.stop()


if __name__ == "__main__":
    from kons_service.cli import main as kons

    sys.exit(kons(["serve", *sys.argv[1:]]))
