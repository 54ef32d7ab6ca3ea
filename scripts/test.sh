#!/usr/bin/env bash
# The one test command (README): unit, contract, service and persistence tests against a real Redis.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 -m pytest -q "$@"
