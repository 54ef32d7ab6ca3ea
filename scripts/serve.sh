#!/usr/bin/env bash
# Run the kons service (the README's "run the service" command) on a fresh machine.
#
#   bash scripts/serve.sh                      # http://127.0.0.1:8000, embedded Redis under ./data
#   KONS_REDIS_URL=redis://host:6379/0 KONS_API_KEYS="tenantA:keyA" bash scripts/serve.sh
#
# Installs the package with its service extra, then runs `python -m app`. Every setting is a KONS_*
# variable (KONS_PORT, KONS_WORKERS, KONS_DATA_DIR, ...; see app/settings.py). Without KONS_REDIS_URL the
# service starts (and stops) its own Redis server, persisting to an append-only file in KONS_DATA_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -e ".[service]"
exec python3 -m app
