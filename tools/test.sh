#!/usr/bin/env bash
# `make test`: every test, in five pytest processes that run at the same time, because most of the wall time is
# spent waiting on real processes (kube-apiserver, the Pulumi engine, the Dynamo frontend and mocker, Prometheus,
# git worktrees), not on this machine's two cores:
#   engine-lifecycle  tests/test_engine.py's per-target up/update/destroy lifecycle and three slow tests (its own
#                     local control plane)
#   engine-main       the rest of tests/test_engine.py (waits, cache, policy pack, simulate; its own control plane)
#   engine-day2       tests/test_transitions.py: the day-2 changes a team makes, each as a transition (its own control plane)
#   engine-other      the other engine-marked files, each on its own small control plane (selection, DRA, Karpenter,
#                     autoscaling admission, upgrade path), then `stacks diff --base` on git worktrees (test_review)
#   engine-node       tests/test_node.py: targets as rendered on the real node (tools/kube-node.sh; its own control
#                     plane and node: one per machine, so only this group starts one)
#   unit-heavy        the unit files that run real processes (the serving rig, Prometheus, nodeadm) or the whole EKS
#                     program under mocks many times (the AWS rules, the cluster mocks): half the unit tests' time
#   unit              everything else: unit, mocks, fidelity, config properties, preflight
# Each process writes its own log; they are printed in this order when all have ended, with the slowest tests.
# Exit status: 0 only when all pass. Extra arguments go to every pytest process.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
LOGS=${TEST_LOG_DIR:-$(mktemp -d)}
mkdir -p "$LOGS"

declare -A pids
pytest() { "$PY" -m pytest -p no:cacheprovider --durations=8 "$@"; }
start() { # name, then a command (a shell function call) run in the background with its output in the group's log
  local name=$1
  shift
  "$@" >"$LOGS/$name.log" 2>&1 &
  pids[$name]=$!
  echo "test: $name started (log: $LOGS/$name.log)"
}
# The other engine files, then the review tests (not engine-marked, but slow: they render every target at two refs):
# both pytest runs must pass.
# Both always run; the group's status is the first failure's (exit 5, nothing collected, counts as a failure here
# too, below, unless extra arguments narrowed the run).
engine_other() {
  local a b
  pytest -m engine --ignore=tests/test_engine.py --ignore=tests/test_transitions.py --ignore=tests/test_node.py "$@"
  a=$?
  pytest tests/test_review.py "$@"
  b=$?
  if [[ $a -ne 0 ]]; then return $a; fi
  return $b
}

t0=$SECONDS
# The linter and the formatter's check first (pyproject.toml [tool.ruff]: pyflakes and pycodestyle's checks, line length 130; under a second): a failure stops the
# run before the minutes of tests.
if ! "$PY" -m ruff check --quiet .; then
  echo "test: ruff check failed (fix the lines above; \`.venv/bin/ruff check --fix .\` fixes the safe ones)"
  exit 1
fi
if ! "$PY" -m ruff format --check --quiet .; then
  echo "test: ruff format --check failed (the files above; \`.venv/bin/ruff format .\` formats them)"
  exit 1
fi
# Then the type checker (pyproject.toml [tool.mypy]: the program's code, not the tests), incremental through its cache
# in .mypy_cache: measured here, about 13 s on a fresh clone and under 3 s once the cache is warm.
if ! "$PY" -m mypy; then
  echo "test: mypy failed (fix the types above; \`.venv/bin/mypy\` runs the same check)"
  exit 1
fi
# Bytecode, written once before the groups start: the project's modules (imported by every test process and every
# Pulumi program run the engine tests start) and pytest's assertion-rewritten test modules (a collection of tests/
# writes them). PYTHONDONTWRITEBYTECODE, where the caller's environment sets it, would make each of those processes
# compile and rewrite everything again: measured here, a cached collection of the unit group takes 3.6 s of CPU
# against 9.4 s uncached, and a Pulumi program's imports 0.8 s against 1.5 s.
unset PYTHONDONTWRITEBYTECODE
"$PY" -m compileall -q components stacks tests tools __main__.py >/dev/null
"$PY" -m pytest -p no:cacheprovider --collect-only -q tests >/dev/null 2>&1
echo "test: bytecode written in $((SECONDS - t0)) s"
# One slow test of test_engine.py joins the lifecycle process, so that the two test_engine.py processes end at about
# the same time (each starts its own control plane; measured: lifecycle 8:36 / the rest 7:40 with two tests moved).
FIRST="lifecycle or protected_cache_class_change_is_refused"
start engine-lifecycle pytest -m engine -k "$FIRST" tests/test_engine.py "$@"
start engine-main pytest -m engine -k "not ($FIRST)" tests/test_engine.py "$@"
start engine-day2 pytest -m engine tests/test_transitions.py "$@"
start engine-other engine_other "$@"
start engine-node pytest -m engine tests/test_node.py "$@"
# One pytest process for all unit tests ran 10 min alone on this machine after the engine groups had ended (measured
# 605 s, against 465 s for the longest engine group); split in two, each half ends with the engine groups.
HEAVY=(tests/test_rig.py tests/test_prometheus.py tests/test_nodeadm.py tests/test_aws_rules.py tests/test_cluster_mocks.py)
start unit-heavy pytest -m "not engine" "${HEAVY[@]}" "$@"
start unit pytest -m "not engine" --ignore=tests/test_review.py "${HEAVY[@]/#/--ignore=}" "$@"
TEST_GROUPS=(engine-lifecycle engine-main engine-day2 engine-other engine-node unit-heavy unit)

rc=0
declare -A status
for name in "${TEST_GROUPS[@]}"; do
  wait "${pids[$name]}"
  status[$name]=$?
done
for name in "${TEST_GROUPS[@]}"; do
  echo
  echo "================================ $name (exit ${status[$name]}) ================================"
  cat "$LOGS/$name.log"
  # pytest exit 5: no test collected in this group. With extra arguments (e.g. a -k that selects none of this group's
  # tests) that is expected; in a full run it means a group lost its tests, which is a failure.
  if [[ ${status[$name]} -ne 0 ]] && ! [[ ${status[$name]} -eq 5 && $# -gt 0 ]]; then rc=1; fi
done
echo
for name in "${TEST_GROUPS[@]}"; do
  echo "test: $name exit ${status[$name]}: $(grep -E '^(=+ )?[0-9]+ (passed|failed)|^=+ .*(passed|failed|error).* in ' "$LOGS/$name.log" | tail -1)"
done
echo "test: wall time $((SECONDS - t0)) s; exit $rc"
exit $rc
