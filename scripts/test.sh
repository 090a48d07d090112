#!/usr/bin/env bash
# Installs everything the tests need, then runs them all: lint, types, the documentation build,
# the instruction guard (benchmarks/instructions.py --check: our server's instructions per call
# against the recorded figures), every test on the main Python (pytest, with the
# interoperability matrix against pinned MCP peers), the unit tests on the other supported
# Pythons, and the official MCP conformance suite.
#
# Python packages go into virtual environments under .cache/venvs/, one per Python version,
# never into the system Python (Debian and Ubuntu refuse that: externally-managed-environment).
#   PYTHON             the main interpreter, 3.11 or newer (default python3)
#   MRTR_TEST_PYTHONS  the other versions the unit tests run on (default "3.12 3.13"; "" for
#                      none); each is found on PATH (python3.12) or under pyenv
# The unit tests are the test files listed in tests/suites.py (pytest marker `unit`).
# Run from anywhere: bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BASE_PYTHON="${PYTHON:-python3}"
EXTRA_VERSIONS="${MRTR_TEST_PYTHONS-3.12 3.13}"
VENVS=.cache/venvs

step() { echo "== $* [${SECONDS} s]"; }

# Background jobs (and the command each is running) end with the script, also when it fails.
stop_jobs() {
    local pid
    for pid in $(jobs -p); do
        pkill -TERM -P "$pid" 2>/dev/null || true
        kill "$pid" 2>/dev/null || true
    done
}
trap stop_jobs EXIT

# pip_install PYTHON ARGS...: quiet, and without the warning a pip configured with absent local
# index folders prints once per package.
pip_install() {
    local python=$1
    shift
    "$python" -m pip install --quiet --disable-pip-version-check "$@" \
        2> >(grep -v '^WARNING: Location' >&2)
}

# make_venv PYTHON DIR: a virtual environment of PYTHON at DIR, made once and then kept.
make_venv() {
    local python=$1 dir=$2 package
    # One cut short (its pip missing) or whose Python is gone is made anew.
    if [[ -x "$dir/bin/python" ]] && "$dir/bin/python" -c 'import pip' 2>/dev/null; then
        return 0
    fi
    rm -rf "$dir"
    "$python" -m venv "$dir" && return 0
    rm -rf "$dir"
    # Debian and Ubuntu ship venv's pip bootstrap apart from Python itself.
    package="python$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-venv"
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package" \
            || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$package"; }
        "$python" -m venv "$dir"
    else
        echo "cannot make a virtual environment with $python: install $package" \
            "(Debian/Ubuntu: sudo apt-get install $package)" >&2
        exit 1
    fi
}

# uv_venv PYTHON DIR ARGS...: a virtual environment of PYTHON at DIR (made once) with ARGS
# installed by uv, which takes seconds where pip takes a minute or more (it resolves, fetches
# and links in parallel, from its own cache, and compiles nothing ahead).
uv_venv() {
    local python=$1 dir=$2
    shift 2
    if ! { [[ -x "$dir/bin/python" ]] && "$dir/bin/python" -c '' 2>/dev/null; }; then
        rm -rf "$dir"
        "$UV" venv --quiet --python "$python" "$dir"
    fi
    "$UV" pip install --quiet --python "$dir/bin/python" "$@"
}

# find_python 3.12: an interpreter of that version, from PATH or pyenv (newest first).
find_python() {
    local candidate
    for candidate in "python$1" $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$1".*/bin/"python$1" \
        2>/dev/null | sort -rV); do
        # A pyenv shim of a version that is not selected exits non-zero here: skip it.
        if "$candidate" -c "import sys; sys.exit(sys.version.startswith('$1.') is False)" \
            2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

step "install (a virtual environment under $VENVS: mrtr editable, with the dev and docs extras," \
    "and the official SDK the benchmark compares with)"
if ! "$BASE_PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "mrtr needs Python 3.11 or newer; $BASE_PYTHON is $("$BASE_PYTHON" -V 2>&1):" \
        "run PYTHON=python3.11 bash scripts/test.sh" >&2
    exit 1
fi
BASE_VERSION=$("$BASE_PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
MAIN_VENV="$PWD/$VENVS/py$BASE_VERSION"
# This one by venv and pip, which every Python has; uv, a pip of its own, installs the rest.
make_venv "$BASE_PYTHON" "$MAIN_VENV"
pip_install "$MAIN_VENV/bin/python" "uv>=0.5,<1"
UV="$MAIN_VENV/bin/uv"
export UV
"$UV" pip install --quiet --python "$MAIN_VENV/bin/python" -e ".[dev,docs]" \
    -r benchmarks/requirements.txt
# Everything below, the tests' own subprocesses and the peers' installers included, runs on it.
export PATH="$MAIN_VENV/bin:$PATH"
PYTHON="$MAIN_VENV/bin/python"

# The other Pythons: found now, so that a missing one fails before anything long runs.
extra_pythons=()
for version in $EXTRA_VERSIONS; do
    [[ "$version" == "$BASE_VERSION" ]] && continue
    if ! found=$(find_python "$version"); then
        echo "Python $version not found (neither python$version on PATH nor under pyenv):" \
            "install it (pyenv install $version), or leave it out:" \
            "MRTR_TEST_PYTHONS=\"${EXTRA_VERSIONS//$version/}\" bash scripts/test.sh" >&2
        exit 1
    fi
    extra_pythons+=("$version=$found")
done

step "programs the tests start (redis-server, haproxy, valgrind, wrk, tmux)"
# Debian puts haproxy in /usr/sbin, which a non-root PATH may lack: look there too.
have() { command -v "$1" >/dev/null || [[ -x "/usr/sbin/$1" || -x "/usr/bin/$1" ]]; }
missing=()
have redis-server || missing+=(redis-server)
have haproxy || missing+=(haproxy)
have valgrind || missing+=(valgrind)
have wrk || missing+=(wrk)
have tmux || missing+=(tmux)  # the terminal `mrtr call` is shown in (test_cli_hostile.py)
if ((${#missing[@]})); then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"
    else
        # The tests that need them fail loudly (they are never skipped).
        echo "install ${missing[*]} (Debian: apt-get install ${missing[*]})" >&2
    fi
fi

step "Node 22 and the npm packages the tests run (conformance suite, benchmark peers)"
bash conformance/run.sh install
"$PYTHON" -c 'from benchmarks import xproc; xproc.ensure_inspector(allow_install=True)'

# Installing is mostly download time: the matrix's peers (several venvs and an npm folder)
# install in the background while lint, types and the documentation are checked. Everything
# they share with the steps above (Node, the Inspector) is there by then.
mkdir -p .cache
PEERS_LOG=.cache/interop-peers.log
PYTHON="$PYTHON" bash scripts/interop_peers.sh >"$PEERS_LOG" 2>&1 &
PEERS_PID=$!

# The other Pythons' unit tests run in the background too, from here to the end: each installs
# mrtr with its dev extra into its own venv, then runs `pytest -m unit` on one worker. They use
# the CPU that the steps below leave while they wait on processes, the network and timeouts.
unit_tests_on() {
    local version=$1 python=$2 venv="$VENVS/py$1"
    uv_venv "$python" "$venv" -e ".[dev]"
    echo "Python $version ($("$venv/bin/python" -V)), the unit tests:"
    "$venv/bin/python" -m pytest -q -m unit
}
extra_versions=()
extra_pids=()
for entry in "${extra_pythons[@]}"; do
    version="${entry%%=*}"
    unit_tests_on "$version" "${entry#*=}" >".cache/unit-tests-py$version.log" 2>&1 &
    extra_versions+=("$version")
    extra_pids+=($!)
done

step "ruff"
"$PYTHON" -m ruff check src tests conformance benchmarks examples
"$PYTHON" -m ruff format --check src tests conformance benchmarks examples

step "mypy (strict, src/mrtr)"
"$PYTHON" -m mypy

step "docs (mkdocs build --strict: a broken link, include or reference fails)"
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

step "instruction guard (callgrind: our server's instructions per plain call and per MRTR flow" \
    "against benchmarks/instructions.json; more than +5% fails)"
# Counts do not move with the machine's load: the peers' installs beside it change nothing. They
# do move with the packages a request runs through, so the guard counts in an environment of its
# own, installed with the record's pins on the record's Python: a new release of pydantic, say,
# changes the main environment, never what the guard compares.
GUARD_MINOR=$("$PYTHON" -c \
    'from benchmarks import instruction_record as r; print(r.python_minor(r.load()))')
if GUARD_BASE=$(find_python "$GUARD_MINOR"); then
    GUARD_VENV="$PWD/$VENVS/guard-py$GUARD_MINOR"
    "$PYTHON" benchmarks/instructions.py --constraints >"$VENVS/guard-constraints.txt"
    uv_venv "$GUARD_BASE" "$GUARD_VENV" -e . -r benchmarks/requirements.txt \
        -c "$VENVS/guard-constraints.txt"
    "$GUARD_VENV/bin/python" benchmarks/instructions.py --check --strict
else
    echo "instruction guard not run: its record was counted on Python $GUARD_MINOR, not found" \
        "here (counts of another version are not comparable)"
fi

step "MCP peers of the interoperability matrix (pinned, each in its own venv or npm folder)"
if ! wait "$PEERS_PID"; then
    cat "$PEERS_LOG" >&2
    echo "installing the interoperability matrix's peers failed (log above)" >&2
    exit 1
fi
cat "$PEERS_LOG"
step "pytest (Python $BASE_VERSION, every test)"
# Two workers, a test file each at a time (its module fixtures start once): most tests wait on
# a server or a peer process, so this halves the run. --durations names the slowest tests, to
# keep the whole run within its time budget.
"$PYTHON" -m pytest -q -n 2 --dist loadfile --durations=25

step "conformance (official MCP suite, 2026-07-28 and 2025-11-25)"
PYTHON="$PYTHON" bash conformance/run.sh

failed=()
for i in "${!extra_versions[@]}"; do
    version="${extra_versions[$i]}"
    step "pytest (Python $version, the unit tests; log: .cache/unit-tests-py$version.log)"
    wait "${extra_pids[$i]}" || failed+=("$version")
    cat ".cache/unit-tests-py$version.log"
done
if ((${#failed[@]})); then
    echo "the unit tests failed on Python ${failed[*]} (logs above)" >&2
    exit 1
fi
step "done"
