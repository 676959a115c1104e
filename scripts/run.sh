#!/usr/bin/env bash
# The one entry point on a fresh Debian 12 machine with Python 3.11 and Java 17:
# installs what Sluice needs (pinned by uv.lock), then runs it.
#
#   bash scripts/run.sh up [sluice up flags]   # the main job: broker, workers, generator, Dagster
#   bash scripts/run.sh test [pytest flags]    # the test suite
#   bash scripts/run.sh sluice ARGS            # any sluice command
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "scripts/run.sh: $*" >&2; exit 1; }

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
"$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null \
  || die "Python 3.11 is required (found: $("$PYTHON" --version 2>&1)). Install it: sudo apt-get install -y python3.11 python3.11-venv"

java_major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1 || true)
if [ -z "${java_major}" ] || [ "${java_major}" -lt 17 ]; then
  die "Java 17 or newer is required for Spark (found: ${java_major:-none}). Install it: sudo apt-get install -y openjdk-17-jre-headless"
fi

if ! "$PYTHON" -m uv --version >/dev/null 2>&1; then
  echo "installing uv (the lock-file installer) ..." >&2
  "$PYTHON" -m pip install --quiet uv || die "could not install uv: $PYTHON -m pip install uv"
fi
# Bytecode compiled once here: every Dagster run, Pipes job and stream worker is a new
# interpreter, and where PYTHONDONTWRITEBYTECODE is set (or the tree is read-only) none would
# ever be cached: great-expectations alone took 8.9 s to import from source, 4.4 s compiled.
"$PYTHON" -m uv sync --frozen --quiet --compile-bytecode \
  || die "dependency install failed: $PYTHON -m uv sync --frozen --compile-bytecode"
.venv/bin/python -m compileall -q -j 0 pipelines orchestration assets quality >/dev/null \
  || die "could not compile the project's modules (a syntax error?)"

# need PACKAGE WHY TEST...: run TEST; if it fails, install Debian's PACKAGE (as root) or say how.
need() {
  local package=$1 why=$2
  shift 2
  "$@" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's $package for $why ..." >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$package" >/dev/null; } \
      || die "could not install $package: sudo apt-get install -y $package"
  else
    die "Debian's $package is needed for $why: sudo apt-get install -y $package"
  fi
}

cmd=${1:-}
shift || true
case "$cmd" in
  up) exec .venv/bin/sluice up "$@" ;;
  test)
    need chromium "the browser tests" test -x /usr/bin/chromium
    need postgresql "the control-store tests" bash -c 'ls /usr/lib/postgresql/*/bin/initdb'
    need tmux "the terminal test of sluice up" command -v tmux
    echo "checking the import contracts (pyproject.toml: the package graph runs one way) ..." >&2
    .venv/bin/lint-imports --no-cache || die "an import runs back up the layers (see above)"
    # Three pytest workers, a test file each at a time (its module fixtures stay in one process),
    # in the order tests/conftest.py gives (longest files first; xdist would otherwise order files
    # by their count of tests): the end-to-end tests mostly wait on real processes, so on 2 cores
    # three take 17 min where two take 20 and one process 23 (docs/testing.md).
    # SLUICE_TEST_WORKERS=0 runs in one process; a later -n in the arguments wins.
    workers=${SLUICE_TEST_WORKERS:-3}
    if [ "$workers" = 0 ]; then exec .venv/bin/python -m pytest "$@"; fi
    exec .venv/bin/python -m pytest -n "$workers" --dist loadfile --no-loadscope-reorder "$@" ;;
  sluice) exec .venv/bin/sluice "$@" ;;
  *) die "usage: bash scripts/run.sh up|test|sluice [args]" ;;
esac
