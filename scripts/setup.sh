# shellcheck shell=bash
# Sourced by scripts/test.sh and scripts/serve.sh, the README's two set-up commands, from the checkout's root.
# A fresh Debian or Ubuntu machine may lack what they need, even venv: Debian ships venv's ensurepip apart
# from python3, in python3-venv. As root they install what is missing with apt-get; otherwise they say what
# is missing and what that skips or stops.

venv=.venv

can_apt() {
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1
}

# apt_install PACKAGE...: the package lists are updated once per run, before the first install.
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  if [ -z "${apt_lists_updated:-}" ]; then
    apt-get update -qq
    apt_lists_updated=1
  fi
  apt-get install -y -qq "$@" >/dev/null
}

# provide COMMAND PACKAGE WITHOUT_IT: installs PACKAGE when COMMAND is missing and this is root; otherwise
# prints a note ending with WITHOUT_IT. /usr/sbin is looked in too: a non-root PATH often lacks it.
provide() {
  if command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; then
    return
  fi
  if can_apt; then
    apt_install "$2"
  else
    echo "note: no $1 on PATH and not root (or no apt-get); $3"
  fi
}

# make_venv: .venv made with python3, unless it has a working pip. A venv that failed half-way (python3
# without ensurepip) leaves .venv/bin/python with no pip behind, so "a python is there" is not enough.
make_venv() {
  if "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    return
  fi
  if ! python3 -c 'import ensurepip' >/dev/null 2>&1 && can_apt; then
    apt_install python3 python3-venv
  fi
  if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "error: kons needs Python 3.11 or later as python3 on PATH" \
      "(found: $(python3 --version 2>/dev/null || echo none))" >&2
    exit 1
  fi
  if ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
    echo "error: $(command -v python3) cannot make a virtualenv (it has no ensurepip);" \
      "on Debian or Ubuntu, as root: apt-get install python3-venv; then run this again" >&2
    exit 1
  fi
  python3 -m venv --clear "$venv"
}

# install_checkout EXTRAS: the checkout into .venv, editable, with its extras EXTRAS (comma-separated) at the
# versions pinned in constraints.txt. editable_mode=compat puts the checkout's root on sys.path: the default
# mode's import hook is consulted after sys.path, where a directory named kons with no __init__.py wins as an
# empty namespace package, and the clone itself is one (`git clone` names it kons) for every script run
# from its parent directory: `from kons_service import Client` failed there.
install_checkout() {
  local install=("$venv/bin/python" -m pip install --disable-pip-version-check -c constraints.txt
    --config-settings editable_mode=compat -e ".[$1]")
  # pip's notes about extra index locations of this machine go to stderr; failures still stop the script.
  "${install[@]}" -q 2>/dev/null || "${install[@]}"
}
