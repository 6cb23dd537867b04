#!/usr/bin/env bash
# Runs llama.cpp's own server test suite (tools/server/tests of the b11434 sdist, unpacked
# by tests/fixtures.sh) against llama-server and `pocket serve`, both started by server.sh
# with the suite's models swapped for the local fixtures, and writes a summary: every
# test's outcome on each server and the share of llama-server's passes that pocket passes.
#
#   tests/server_suite/run.sh [OUT.md] [-- PYTEST ARGS]   (default: results/server-suite/DATE.md)
#   SUITE_SERVERS="llama pocket"   which servers, in order
#   SUITE_TIMEOUT=60                seconds per test (pytest-timeout) before it counts as failed
#   SUITE_FILES="unit/test_x.py ..." the test files or ids to run (default: SCOPE below);
#                                   "subset": the ids of subset.txt (the CI test's)
#   SUITE_SESSION_TIMEOUT=S         stop each server's run after S seconds (what ran is summarized)
#   SUITE_PORT=18470                port of the servers (away from 8080, which people use)
#   SUITE_LOGS=/tmp/pocket-server-suite   where each server's pytest log is kept
#
# Needs target/release/pocket (cargo build --release -p pocket) and the fixtures.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
CACHE="${POCKET_CACHE:-$HOME/.cache/pocket}"
PY="$CACHE/venv/bin/python"
suite="$CACHE/llama.cpp/tools/server/tests"
out="$root/results/server-suite/$(date -u +%Y-%m-%d).md"
if [ $# -gt 0 ] && [ "$1" != "--" ]; then out="$1"; shift; fi
[ "${1:-}" = "--" ] && shift
logs="${SUITE_LOGS:-${TMPDIR:-/tmp}/pocket-server-suite}"
# The files of a CPU text-generation drop-in. The others test features pocket does not
# have and says so (embeddings, reranking, multimodal, LoRA, speculative decoding, the
# multi-model router tests that need the hub cache's models, MCP / tools / proxy / stream-resume,
# infill, slot save/restore, idle sleep, tool-call parsing, the Anthropic / GCP /
# SystemOne APIs):
# SUITE_FILES="unit" runs them all.
SCOPE="unit/test_basic.py unit/test_completion.py unit/test_chat_completion.py
  unit/test_ctx_shift.py unit/test_ignore_eos.py unit/test_metrics.py unit/test_security.py
  unit/test_template.py unit/test_tokenize.py
  unit/test_compat_oai_responses.py unit/test_kv_keep_only_active.py"
say() { echo "[server-suite] $*" >&2; }

[ -f "$suite/conftest.py" ] || { say "no suite at $suite (run compare/setup.sh)"; exit 1; }
# The suite's requirements.txt, with the versions of openai, numpy and requests the venv
# already has (newer than its pins; setup.sh installed them for pocket's own tests).
if ! "$PY" -c "import pytest, xdist, filelock, aiohttp, prometheus_client, wget, pytest_timeout" 2>/dev/null; then
  say "installing the suite's requirements into $CACHE/venv"
  "$PY" -m pip install -q --disable-pip-version-check "pytest~=8.3.3" "pytest-xdist~=3.6" \
    "filelock~=3.16" "prometheus-client~=0.20.0" "wget~=3.2" "aiohttp~=3.9.3" \
    "pytest-timeout~=2.3" openai numpy requests
fi

# A private copy: the suite writes tmp/ and caches beside itself.
work="$(mktemp -d "${TMPDIR:-/tmp}/pocket-server-suite.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cp -r "$suite" "$work/tests"
mkdir -p "$(dirname "$out")"

files="${SUITE_FILES:-$SCOPE}"
[ "$files" = subset ] && files="$(grep -v '^#' "$here/subset.txt")"
xmls=()
for server in ${SUITE_SERVERS:-llama pocket}; do
  say "running the suite against $server (log: $work/$server.log)"
  start=$(date +%s)
  (cd "$work/tests" && SUITE_SERVER="$server" LLAMA_SERVER_BIN_PATH="$here/server.sh" \
    PORT="${SUITE_PORT:-18470}" PYTHONPATH="$here" \
    "$PY" -m pytest -p suite_plugin -p no:cacheprovider -q -m "not slow" \
      --timeout "${SUITE_TIMEOUT:-60}" ${SUITE_SESSION_TIMEOUT:+--session-timeout "$SUITE_SESSION_TIMEOUT"} --junitxml "$work/$server.xml" $files "$@" \
      >"$work/$server.log" 2>&1) || true
  say "$server: $(tail -n 1 "$work/$server.log") in $(( $(date +%s) - start )) s"
  mkdir -p "$logs"; cp "$work/$server.log" "$logs/$server.log"
  [ -f "$work/$server.xml" ] && cp "$work/$server.xml" "$logs/$server.xml"
  xmls+=("$server=$work/$server.xml")
done
"$PY" "$here/summarize.py" "$out" "${xmls[@]}"
say "summary: $out"
