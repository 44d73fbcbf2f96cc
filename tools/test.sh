#!/usr/bin/env bash
# `make test`: every test, in three pytest processes that run at the same time, because most of the wall time is
# spent waiting on real processes (kube-apiserver, the Pulumi engine, the Dynamo frontend and mocker, Prometheus),
# not on this machine's two cores:
#   engine-main   tests/test_engine.py (the Pulumi engine against the local control plane, its long waits)
#   engine-other  the other engine-marked files; each starts its own small control plane (simulate, DRA, Karpenter,
#                 upgrade path, selection)
#   unit          everything else: unit, mocks, fidelity, the AWS rules, the serving rig and Prometheus
# Each process writes its own log; they are printed in this order when all have ended, with the slowest tests.
# Exit status: 0 only when all three pass. Extra arguments go to every pytest process.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
LOGS=${TEST_LOG_DIR:-$(mktemp -d)}
mkdir -p "$LOGS"

declare -A pids
start() { # name, pytest args...
  local name=$1
  shift
  "$PY" -m pytest -p no:cacheprovider --durations=8 "$@" >"$LOGS/$name.log" 2>&1 &
  pids[$name]=$!
  echo "test: $name started (log: $LOGS/$name.log)"
}

t0=$SECONDS
start engine-main -m engine tests/test_engine.py "$@"
start engine-other -m engine --ignore=tests/test_engine.py "$@"
start unit -m "not engine" "$@"

rc=0
declare -A status
for name in engine-main engine-other unit; do
  wait "${pids[$name]}"
  status[$name]=$?
done
for name in engine-main engine-other unit; do
  echo
  echo "================================ $name (exit ${status[$name]}) ================================"
  cat "$LOGS/$name.log"
  # pytest exit 5: no test collected in this group (e.g. a -k that selects none): not a failure.
  if [[ ${status[$name]} -ne 0 && ${status[$name]} -ne 5 ]]; then rc=1; fi
done
echo
for name in engine-main engine-other unit; do
  echo "test: $name exit ${status[$name]}: $(grep -E '^(=+ )?[0-9]+ (passed|failed)|^=+ .*(passed|failed|error).* in ' "$LOGS/$name.log" | tail -1)"
done
echo "test: wall time $((SECONDS - t0)) s; exit $rc"
exit $rc
