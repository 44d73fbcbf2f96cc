#!/usr/bin/env bash
# egctl.sh: build-or-reuse Envoy Gateway's egctl at the pinned chart's version and link it into <repo>/.tools/bin/egctl.
#
# Used by tests/test_front_door_translate.py: `egctl x translate --from gateway-api --to xds` turns the front door's
# Gateway API and Envoy Gateway objects into the Envoy configuration the managed gateway would serve, offline (no
# cluster, no Envoy binary), so the tests assert on the real data plane: authentication on every route, the header
# removals, the route timeout, TLS on the listener, the rate limit.
#
# Version: `charts.envoy-gateway.version` in stacks/registry/versions.yaml (the chart the front door installs; the Go
# module github.com/envoyproxy/gateway is tagged with the same version). Built from the Go module proxy with the
# machine's Go (GOTOOLCHAIN=local), once per version into
# ${DYNAMO_TOOLCHAIN_CACHE:-$HOME/.cache/dynamo-pulumi-toolchain}/egctl-<version>/bin/egctl (about 5 min on 2 cores,
# a ~330 MB binary); a warm cache only re-creates the symlink.
#
# Usage: tools/egctl.sh            build/reuse and link; the last stdout line is the binary's path
#        tools/egctl.sh --version  print the pinned version and exit
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${DYNAMO_TOOLCHAIN_CACHE:-$HOME/.cache/dynamo-pulumi-toolchain}"
BIN_DIR="$REPO/.tools/bin"
MODULE=github.com/envoyproxy/gateway

log() { echo "egctl: $*" >&2; }
die() {
	echo "egctl: ERROR: $*" >&2
	exit 1
}

# The pin: the version of `envoy-gateway:` in the `charts:` section of stacks/registry/versions.yaml.
VERSION="$(awk '/^[^ #]/ { section = $1 } section == "charts:" && $1 == "envoy-gateway:" { if (match($0, /version: "[^"]+"/)) { v = substr($0, RSTART + 10, RLENGTH - 11); print v; exit } }' "$REPO/stacks/registry/versions.yaml")"
[[ "$VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] \
	|| die "stacks/registry/versions.yaml: charts.envoy-gateway.version must be a version like v1.9.1, got '${VERSION}'"

case "${1:-}" in
"") ;;
--version)
	echo "$VERSION"
	exit 0
	;;
-h | --help)
	sed -n '2,15p' "$0"
	exit 0
	;;
*)
	echo "usage: $0 [--version]" >&2
	exit 2
	;;
esac

OUT_DIR="$CACHE/egctl-$VERSION"
OUT="$OUT_DIR/bin/egctl"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export GOFLAGS="-buildvcs=false"

build() {
	command -v go >/dev/null || die "go is not installed"
	local logf="$OUT_DIR/build.log" tmp="$OUT_DIR/tmp.$$" t0=$SECONDS
	mkdir -p "$OUT_DIR/bin"
	: >"$logf"
	log "building $MODULE/cmd/egctl@$VERSION (about 5 minutes on 2 cores; log: $logf)"
	rm -rf "$tmp"
	mkdir -p "$tmp"
	# `go install pkg@version` builds with the module's own go.mod and go.sum (checked against the checksum database).
	if ! GOBIN="$tmp" go install -trimpath -ldflags "-s -w" "$MODULE/cmd/egctl@$VERSION" >>"$logf" 2>&1; then
		rm -rf "$tmp"
		tail -n 30 "$logf" >&2
		die "go build of $MODULE/cmd/egctl@$VERSION failed (Go $(go env GOVERSION); log: $logf)"
	fi
	mv -f "$tmp/egctl" "$OUT"
	rm -rf "$tmp"
	log "built egctl $VERSION in $((SECONDS - t0))s"
}

mkdir -p "$CACHE" "$BIN_DIR"
exec 9>"$CACHE/.egctl-build.lock"
flock 9
[[ -x "$OUT" ]] || build
flock -u 9
ln -sfn "$OUT" "$BIN_DIR/egctl"
echo "$BIN_DIR/egctl"
