#!/usr/bin/env bash
# The README's two set-up commands on a bare Debian 12 (bookworm), in a Podman container made here from
# deb.debian.org: what a machine where everything is installed (CI's) cannot show, a missing install step.
# Not part of the test suite: minutes long, root only (docs/tests-and-benchmarks.md).
#
#   bash scripts/bare_machine_check.sh                  # serve.sh + the quick start, then test.sh: every test
#   bash scripts/bare_machine_check.sh -m "not slow"    # arguments go to test.sh's pytest
#
# Needs root, `apt-get install podman mmdebstrap`, and the Debian mirror and PyPI reachable. The image is
# minbase plus what the README assumes of a fresh machine: python3 (Debian's, without python3-venv), git
# (the clone) and ca-certificates; curl is for the quick start's HTTP half. Settings:
#   KONS_CHECK_CA      a CA bundle for the container's pip to trust (a TLS-intercepting proxy's)
#   KONS_CHECK_PODMAN  extra `podman run` options (a host whose kernel refuses podman's default rlimits or
#                      crun's cgroups: "--runtime runc --ulimit nofile=20000:20000 --ulimit nproc=4096:4096")
# The clone is of the checkout's HEAD: commit what is to be checked.
set -euo pipefail
cd "$(dirname "$0")/.."
image=localhost/kons-bare-bookworm
work=$(mktemp -d /var/tmp/kons-bare.XXXXXX)
root_box=kons-bare-root-$$
user_box=kons-bare-user-$$
trap 'podman rm -f -t 0 "$root_box" "$user_box" >/dev/null 2>&1; rm -rf "$work"' EXIT

if ! podman image exists "$image"; then
  mmdebstrap --quiet --variant=minbase --include=python3,git,ca-certificates,curl \
    bookworm "$work/rootfs.tar" http://deb.debian.org/debian
  podman import --quiet "$work/rootfs.tar" "$image" >/dev/null
  rm "$work/rootfs.tar"
fi
git clone --quiet . "$work/kons"

# box NAME: a fresh container from the image, the clone copied in as /root/kons (not mounted: nothing of
# this machine's but what the options lend).
box() {
  local options=()
  if [ -n "${KONS_CHECK_CA:-}" ]; then
    options+=(-v "$KONS_CHECK_CA:/etc/kons-check-ca.crt:ro" -e PIP_CERT=/etc/kons-check-ca.crt)
  fi
  # shellcheck disable=SC2086  # KONS_CHECK_PODMAN is a list of options
  podman run -d --name "$1" "${options[@]}" ${KONS_CHECK_PODMAN:-} "$image" sleep infinity >/dev/null
  podman cp "$work/kons" "$1:/root/kons"
}

seconds() { echo $(( $(date +%s) - $1 )); }

# Extracts the README's first fenced block of language $1 that contains $2.
readme_block() {
  awk -v language="$1" -v needle="$2" '
    $0 == "```" language { inside = 1; block = ""; next }
    inside && $0 == "```" { inside = 0; if (index(block, needle)) { printf "%s", block; exit } next }
    inside { block = block $0 "\n" }' README.md
}

echo "== root: bash scripts/serve.sh on a fresh clone"
box "$root_box"
start=$(date +%s)
# serve.sh ends in exec: the pid written is the service's, for the SIGINT that stops it (minbase has no pkill).
podman exec -w /root/kons "$root_box" bash -c 'echo $$ > /root/serve.pid; exec bash scripts/serve.sh' \
  > "$work/serve.log" 2>&1 &
serving=$!
until podman exec "$root_box" curl -sf localhost:8000/healthz >/dev/null 2>&1; do
  if ! kill -0 "$serving" 2>/dev/null; then
    tail -30 "$work/serve.log"
    echo "FAIL: serve.sh stopped before /healthz answered" >&2
    exit 1
  fi
  sleep 1
done
echo "/healthz answered $(seconds "$start") s after serve.sh started"

echo "== the README's quick start, run from the clone's parent directory (/root), then its curl example"
readme_block python "from kons_service import Client" | podman exec -i "$root_box" sh -c 'cat > /root/quickstart.py'
podman exec -w /root "$root_box" /root/kons/.venv/bin/python /root/quickstart.py
readme_block bash "irises/predict" | sed 's/^curl /curl -sS /; s/^curl .*/& \&\& echo/' | podman exec -i "$root_box" bash -e
podman exec "$root_box" bash -c 'kill -INT "$(cat /root/serve.pid)"'
wait "$serving"

echo "== root: bash scripts/test.sh $*"
start=$(date +%s)
podman exec -w /root/kons "$root_box" bash scripts/test.sh "$@"
echo "test.sh took $(seconds "$start") s"

echo "== not root, python3 without python3-venv: serve.sh must stop and say what to install"
box "$user_box"
podman exec "$user_box" bash -c 'useradd --create-home dev && cp -r /root/kons /home/dev/kons && chown -R dev: /home/dev/kons'
if podman exec -u dev -w /home/dev/kons "$user_box" bash scripts/serve.sh; then
  echo "FAIL: serve.sh ran without venv" >&2
  exit 1
fi
echo "== not root, python3-venv installed, no Redis, HAProxy or Chromium: test.sh's notes and skips"
podman exec "$user_box" bash -c 'DEBIAN_FRONTEND=noninteractive apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null'
podman exec -u dev -w /home/dev/kons "$user_box" bash scripts/test.sh \
  tests/service/test_service_routing.py tests/service/test_dashboard_browser.py
echo "== done"
