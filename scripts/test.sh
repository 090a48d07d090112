#!/usr/bin/env bash
# Installs everything the tests need, then runs them all: lint, types, unit and integration
# tests (pytest), and the official MCP conformance suite. Run from anywhere: bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"

echo "== install (editable, with dev extras, and the official SDK the benchmark compares with)"
"$PYTHON" -m pip install --quiet --disable-pip-version-check -e ".[dev]" -r benchmarks/requirements.txt

echo "== ruff"
"$PYTHON" -m ruff check src tests conformance benchmarks
"$PYTHON" -m ruff format --check src tests conformance benchmarks

echo "== mypy (strict, src/mrtr)"
"$PYTHON" -m mypy

echo "== pytest"
"$PYTHON" -m pytest -q

echo "== conformance (official MCP suite, 2026-07-28)"
PYTHON="$PYTHON" bash conformance/run.sh
