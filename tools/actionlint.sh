#!/usr/bin/env bash
# Lint the GitHub Actions workflows with actionlint, built from the Go module proxy (no binary download).
#   tools/actionlint.sh                 # lint .github/workflows/*.yml
#   tools/actionlint.sh FILE...         # lint these files
# The binary is cached in ${DYNAMO_TOOLCHAIN_CACHE:-$HOME/.cache/dynamo-pulumi-toolchain}/actionlint-<ver>/.
set -euo pipefail
ACTIONLINT_VERSION="${ACTIONLINT_VERSION:-v1.7.12}"
CACHE="${DYNAMO_TOOLCHAIN_CACHE:-$HOME/.cache/dynamo-pulumi-toolchain}"
DIR="$CACHE/actionlint-$ACTIONLINT_VERSION"
BIN="$DIR/actionlint"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

if [[ ! -x "$BIN" ]]; then
  command -v go >/dev/null || { echo "actionlint.sh: go is not installed (needed to build actionlint $ACTIONLINT_VERSION)" >&2; exit 3; }
  mkdir -p "$DIR"
  tmp="$(mktemp -d "$DIR/.build.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  echo "actionlint.sh: building actionlint $ACTIONLINT_VERSION from the Go module proxy" >&2
  GOFLAGS=-mod=mod GOBIN="$tmp" CGO_ENABLED=0 go install "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION"
  mv "$tmp/actionlint" "$BIN"
fi

cd "$ROOT"
if [[ $# -eq 0 ]]; then
  set -- .github/workflows/*.yml
fi
# shellcheck/pyflakes integrations are used only if present on PATH; actionlint skips them otherwise.
exec "$BIN" -no-color "$@"
