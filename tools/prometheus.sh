#!/usr/bin/env bash
# prometheus.sh: build-or-reuse the pinned Prometheus server and link it into <repo>/.tools/bin/prometheus.
#
# Used by tests/test_prometheus.py, which scrapes the GPU-free serving rig with the project's PodMonitors and
# evaluates every dashboard query through Prometheus's HTTP API; and its promtool (same module, cmd/promtool, linked
# as <repo>/.tools/bin/promtool), whose `promtool test rules` runs tests/test_alerts.py's unit tests of the alerts.
#
# Version: `toolchain.prometheus` in stacks/registry/versions.yaml (the module version the Go module proxy serves;
# github.com/prometheus/prometheus tags release 3.X.Y as module version v0.3XY.0, e.g. v0.316.0 = 3.16.0, whose
# VERSION file says 3.16.0). Built like tools/kube-local.sh builds its pinned Go binaries: from the Go module
# proxy with the machine's Go (GOTOOLCHAIN=local; v0.316.0's go.mod asks for go 1.26.7), once per version into
# ${DYNAMO_TOOLCHAIN_CACHE:-$HOME/.cache/dynamo-pulumi-toolchain}/prometheus-<version>/prometheus; a warm cache
# only re-creates the symlink.
#
# Build tags (github.com/prometheus/prometheus@v0.316.0 README.md, "Service discovery plugins"):
#   remove_all_sd   "Exclude all optional service discoveries (keeps file_sd, static_sd, and http_sd)": the test
#                   only uses static_configs, and leaving out the cloud SDs (AWS, Azure, GCE, ...) shortens the build.
#   (no builtinassets) web/ui/ui.go is `//go:build !builtinassets`: without the tag the web UI is served from
#                   ./web/ui on disk (absent here, so the UI pages 404) and no npm build is needed; the HTTP API
#                   (/api/v1/*) and /-/ready do not depend on the UI assets.
#
# Usage: tools/prometheus.sh            build/reuse and link; the last stdout line is the binary's path
#        tools/prometheus.sh --version  print the pinned module version and exit
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${DYNAMO_TOOLCHAIN_CACHE:-$HOME/.cache/dynamo-pulumi-toolchain}"
BIN_DIR="$REPO/.tools/bin"
MODULE=github.com/prometheus/prometheus

log() { echo "prometheus: $*" >&2; }
die() {
	echo "prometheus: ERROR: $*" >&2
	exit 1
}

# The pin: the `prometheus:` key of the `toolchain:` section of stacks/registry/versions.yaml.
PROMETHEUS_VERSION="$(awk '/^[^ #]/ { section = $1 } section == "toolchain:" && $1 == "prometheus:" { v = $2; gsub(/"/, "", v); print v; exit }' "$REPO/stacks/registry/versions.yaml")"
[[ "$PROMETHEUS_VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] \
	|| die "stacks/registry/versions.yaml: toolchain.prometheus must be a module version like v0.316.0, got '${PROMETHEUS_VERSION}'"

case "${1:-}" in
"") ;;
--version)
	echo "$PROMETHEUS_VERSION"
	exit 0
	;;
-h | --help)
	sed -n '2,22p' "$0"
	exit 0
	;;
*)
	echo "usage: $0 [--version]" >&2
	exit 2
	;;
esac

OUT_DIR="$CACHE/prometheus-$PROMETHEUS_VERSION"
OUT="$OUT_DIR/prometheus"

# Never let the go command fetch another toolchain behind our back (unless the caller pinned one).
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export GOFLAGS="-buildvcs=false"

build() {
	command -v go >/dev/null || die "go is not installed"
	local logf="$OUT_DIR/build.log" tmp="$OUT_DIR/tmp.$$" dir release t0=$SECONDS
	mkdir -p "$OUT_DIR"
	: >"$logf"
	log "building $MODULE/cmd/prometheus@$PROMETHEUS_VERSION (several minutes on 2 cores; log: $logf)"
	# The module's own VERSION file names the release the binary reports (prometheus --version, /api/v1/status/buildinfo).
	dir="$(go mod download -json "$MODULE@$PROMETHEUS_VERSION" 2>>"$logf" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')" \
		&& [[ -f "$dir/VERSION" ]] || { tail -n 20 "$logf" >&2; die "cannot download $MODULE@$PROMETHEUS_VERSION from the Go module proxy"; }
	release="$(tr -d '[:space:]' <"$dir/VERSION")"
	# Same -X stamps as the module's .promu.yml.
	local ldflags="-s -w -X github.com/prometheus/common/version.Version=$release"
	ldflags+=" -X github.com/prometheus/common/version.Revision=$PROMETHEUS_VERSION"
	ldflags+=" -X github.com/prometheus/common/version.Branch=HEAD"
	ldflags+=" -X github.com/prometheus/common/version.BuildUser=dynamo-pulumi"
	ldflags+=" -X github.com/prometheus/common/version.BuildDate=19700101-00:00:00"
	rm -rf "$tmp"
	mkdir -p "$tmp"
	# `go install pkg@version` builds with the module's own go.mod and go.sum (it has no replace directives).
	if ! GOBIN="$tmp" go install -trimpath -tags remove_all_sd -ldflags "$ldflags" "$MODULE/cmd/prometheus@$PROMETHEUS_VERSION" >>"$logf" 2>&1; then
		rm -rf "$tmp"
		tail -n 30 "$logf" >&2
		die "go build of $MODULE/cmd/prometheus@$PROMETHEUS_VERSION failed (Go $(go env GOVERSION); log: $logf)"
	fi
	mv -f "$tmp/prometheus" "$OUT"
	rm -rf "$tmp"
	log "built prometheus $release ($PROMETHEUS_VERSION) in $((SECONDS - t0))s"
}

build_promtool() {
	local logf="$OUT_DIR/build-promtool.log" tmp="$OUT_DIR/tmp-promtool.$$" t0=$SECONDS
	log "building $MODULE/cmd/promtool@$PROMETHEUS_VERSION (a few minutes on 2 cores; log: $logf)"
	rm -rf "$tmp"
	mkdir -p "$tmp"
	if ! GOBIN="$tmp" go install -trimpath -tags remove_all_sd -ldflags "-s -w" "$MODULE/cmd/promtool@$PROMETHEUS_VERSION" >"$logf" 2>&1; then
		rm -rf "$tmp"
		tail -n 30 "$logf" >&2
		die "go build of $MODULE/cmd/promtool@$PROMETHEUS_VERSION failed (Go $(go env GOVERSION); log: $logf)"
	fi
	mv -f "$tmp/promtool" "$OUT_DIR/promtool"
	rm -rf "$tmp"
	log "built promtool ($PROMETHEUS_VERSION) in $((SECONDS - t0))s"
}

mkdir -p "$CACHE" "$BIN_DIR"
# One build at a time per cache (several clones or CI jobs may share it).
exec 9>"$CACHE/.prometheus-build.lock"
flock 9
[[ -x "$OUT" ]] || build
[[ -x "$OUT_DIR/promtool" ]] || build_promtool
flock -u 9
ln -sfn "$OUT" "$BIN_DIR/prometheus"
ln -sfn "$OUT_DIR/promtool" "$BIN_DIR/promtool"
echo "$BIN_DIR/prometheus"
