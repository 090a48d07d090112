#!/usr/bin/env bash
# Installs everything the tests need, then runs them all: lint, types, unit and integration
# tests (pytest), and the official MCP conformance suite. Run from anywhere: bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"

echo "== install (editable, with dev extras, and the official SDK the benchmark compares with)"
"$PYTHON" -m pip install --quiet --disable-pip-version-check -e ".[dev]" -r benchmarks/requirements.txt

echo "== services the tests start (redis-server, haproxy)"
# Debian puts haproxy in /usr/sbin, which a non-root PATH may lack: look there too.
have() { command -v "$1" >/dev/null || [[ -x "/usr/sbin/$1" || -x "/usr/bin/$1" ]]; }
missing=()
have redis-server || missing+=(redis-server)
have haproxy || missing+=(haproxy)
if ((${#missing[@]})); then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq && apt-get install -y -qq --no-install-recommends redis-server haproxy
    else
        # The tests that need them fail loudly (they are never skipped).
        echo "install ${missing[*]} (Debian: apt-get install redis-server haproxy)" >&2
    fi
fi

echo "== ruff"
"$PYTHON" -m ruff check src tests conformance benchmarks
"$PYTHON" -m ruff format --check src tests conformance benchmarks

echo "== mypy (strict, src/mrtr)"
"$PYTHON" -m mypy

echo "== pytest"
"$PYTHON" -m pytest -q

echo "== conformance (official MCP suite, 2026-07-28 and 2025-11-25)"
PYTHON="$PYTHON" bash conformance/run.sh
