#!/usr/bin/env bash
# Run the kons service (the README's "run the service" command) on a fresh machine.
#
#   bash scripts/serve.sh                      # http://127.0.0.1:8000, embedded Redis under ./data
#   KONS_REDIS_URL=redis://host:6379/0 KONS_API_KEYS="tenantA:keyA" bash scripts/serve.sh
#
# Installs the package with its service extra into the checkout's own virtualenv (.venv, shared with
# scripts/test.sh), then runs `python -m kons_service`. The install is skipped when pyproject.toml,
# constraints.txt and scripts/setup.sh (how it installs) are those of the last install (a stamp in .venv): pip
# takes about 10 s to find nothing to install, most of a restart, and the editable install already runs the
# checkout's current code. Every setting is a KONS_* variable (KONS_PORT, KONS_WORKERS, KONS_DATA_DIR, ...; see
# kons_service/settings.py). Without KONS_REDIS_URL the service starts (and stops) its own Redis server,
# persisting to an append-only file in KONS_DATA_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
make_venv
stamp="$venv/.kons-service-installed"
wanted="$(cat pyproject.toml constraints.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  install_checkout service
  echo "$wanted" > "$stamp"
fi
exec "$venv/bin/python" -m kons_service
