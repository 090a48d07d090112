#!/usr/bin/env bash
# Installs everything the tests need, then runs them all: lint, types, the documentation build,
# unit and integration tests (pytest, with the interoperability matrix against pinned MCP peers),
# and the official MCP conformance suite.
# Run from anywhere: bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"

echo "== install (editable, with dev and docs extras, and the official SDK the benchmark compares with)"
"$PYTHON" -m pip install --quiet --disable-pip-version-check -e ".[dev,docs]" -r benchmarks/requirements.txt

echo "== programs the tests start (redis-server, haproxy, valgrind)"
# Debian puts haproxy in /usr/sbin, which a non-root PATH may lack: look there too.
have() { command -v "$1" >/dev/null || [[ -x "/usr/sbin/$1" || -x "/usr/bin/$1" ]]; }
missing=()
have redis-server || missing+=(redis-server)
have haproxy || missing+=(haproxy)
have valgrind || missing+=(valgrind)
if ((${#missing[@]})); then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"
    else
        # The tests that need them fail loudly (they are never skipped).
        echo "install ${missing[*]} (Debian: apt-get install ${missing[*]})" >&2
    fi
fi

echo "== Node 22 and the npm packages the tests run (conformance suite, benchmark peers)"
bash conformance/run.sh install
"$PYTHON" -c 'from benchmarks import xproc; xproc.ensure_inspector(allow_install=True)'

# The matrix's peers (several venvs and an npm folder) install in the background while lint,
# types and the documentation are checked: it is mostly download time. Everything they share
# with the steps above (Node, the Inspector) is installed by then.
mkdir -p .cache
PEERS_LOG=.cache/interop-peers.log
PYTHON="$PYTHON" bash scripts/interop_peers.sh >"$PEERS_LOG" 2>&1 &
PEERS_PID=$!

echo "== ruff"
"$PYTHON" -m ruff check src tests conformance benchmarks examples
"$PYTHON" -m ruff format --check src tests conformance benchmarks examples

echo "== mypy (strict, src/mrtr)"
"$PYTHON" -m mypy

echo "== docs (mkdocs build --strict: a broken link, include or reference fails)"
# A pinned Mermaid from the npm registry, so that the built site draws its diagrams offline.
MERMAID_VERSION=11.12.0
MERMAID_JS=.cache/docs/node_modules/mermaid/dist/mermaid.min.js
if [[ ! -f "$MERMAID_JS" ]] && command -v npm >/dev/null; then
    npm install --prefix .cache/docs --save-exact --no-audit --no-fund --loglevel=error \
        "mermaid@$MERMAID_VERSION" || echo "Mermaid not installed: the site loads it from its CDN" >&2
fi
if [[ -f "$MERMAID_JS" ]]; then
    mkdir -p docs/assets/javascripts && cp "$MERMAID_JS" docs/assets/javascripts/mermaid.min.js
fi
NO_MKDOCS_2_WARNING=1 "$PYTHON" -m mkdocs build --strict --quiet

echo "== MCP peers of the interoperability matrix (pinned, each in its own venv or npm folder)"
if ! wait "$PEERS_PID"; then
    cat "$PEERS_LOG" >&2
    echo "installing the interoperability matrix's peers failed (log above)" >&2
    exit 1
fi
cat "$PEERS_LOG"

echo "== pytest"
# Two workers, a test file each at a time (its module fixtures start once): most tests wait on
# a server or a peer process, so this halves the run. --durations names the slowest tests, to
# keep the whole run within its time budget.
"$PYTHON" -m pytest -q -n 2 --dist loadfile --durations=25

echo "== conformance (official MCP suite, 2026-07-28 and 2025-11-25)"
PYTHON="$PYTHON" bash conformance/run.sh
