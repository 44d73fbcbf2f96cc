#!/usr/bin/env bash
# nodeadm.sh: build-or-reuse nodeadm (EKS's node bootstrap for AL2023) and the project's nodeadm-check from nodeadm's
# own source, and link both into <repo>/.tools/bin/.
#
# Used by tests/test_nodeadm.py: every user data the program renders (the GPU node groups' launch templates, the
# Karpenter EC2NodeClasses) goes through `nodeadm config check` and through nodeadm-check (tools/nodeadm-check/main.go:
# nodeadm's config provider chain, validation, containerd snapshotter decision and containerd config generation), as a
# node does at boot.
#
# Source: the reference data's copy of awslabs/amazon-eks-ami nodeadm/ at commit 81fec2e8
# (${DYNAMO_REFERENCE:-<repo>/../shared/reference}/tools/nodeadm; the Go module proxy serves only a 2024
# pseudo-version of that module, but serves all its dependencies). Built once per source tree (keyed by the sha256 of
# its go.sum and of tools/nodeadm-check/main.go) into
# ${DYNAMO_TOOLCHAIN_CACHE:-$HOME/.cache/dynamo-pulumi-toolchain}/nodeadm-<key>/bin/ (about a minute on 2 cores).
# Without the reference data it prints why and exits 0 (the tests that need it then say what is missing).
#
# Usage: tools/nodeadm.sh   build/reuse and link; the last stdout line is nodeadm's path (or nothing)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${DYNAMO_TOOLCHAIN_CACHE:-$HOME/.cache/dynamo-pulumi-toolchain}"
BIN_DIR="$REPO/.tools/bin"
SRC="${DYNAMO_REFERENCE:-$REPO/../shared/reference}/tools/nodeadm"
CHECK="$REPO/tools/nodeadm-check/main.go"
EXPORT="$REPO/tools/nodeadm-check/export.go.txt"  # copied into the build copy's internal/containerd

log() { echo "nodeadm: $*" >&2; }
die() {
	echo "nodeadm: ERROR: $*" >&2
	exit 1
}

if [[ ! -f "$SRC/go.mod" ]]; then
	log "no nodeadm source at $SRC (the reference data's tools/nodeadm; set DYNAMO_REFERENCE): not built"
	exit 0
fi
KEY="$(cat "$SRC/go.sum" "$CHECK" "$EXPORT" | sha256sum | cut -c1-12)"
OUT_DIR="$CACHE/nodeadm-$KEY"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export GOFLAGS="-mod=mod -buildvcs=false"

build() {
	command -v go >/dev/null || die "go is not installed"
	local logf="$OUT_DIR/build.log" tmp="$OUT_DIR/src.$$" t0=$SECONDS
	mkdir -p "$OUT_DIR/bin"
	: >"$logf"
	log "building nodeadm and nodeadm-check from $SRC (about a minute on 2 cores; log: $logf)"
	rm -rf "$tmp"
	cp -r "$SRC" "$tmp"
	chmod -R u+w "$tmp"
	mkdir -p "$tmp/cmd/nodeadm-check"
	cp "$CHECK" "$tmp/cmd/nodeadm-check/main.go"
	cp "$EXPORT" "$tmp/internal/containerd/zz_nodeadm_check_export.go"
	if ! (cd "$tmp" && go build -trimpath -ldflags "-s -w" -o "$OUT_DIR/bin/nodeadm" ./cmd/nodeadm \
		&& go build -trimpath -ldflags "-s -w" -o "$OUT_DIR/bin/nodeadm-check" ./cmd/nodeadm-check) >>"$logf" 2>&1; then
		rm -rf "$tmp"
		tail -n 30 "$logf" >&2
		die "go build of nodeadm failed (Go $(go env GOVERSION); log: $logf)"
	fi
	rm -rf "$tmp"
	log "built nodeadm and nodeadm-check in $((SECONDS - t0))s"
}

mkdir -p "$CACHE" "$BIN_DIR"
exec 9>"$CACHE/.nodeadm-build.lock"
flock 9
[[ -x "$OUT_DIR/bin/nodeadm-check" ]] || build
flock -u 9
ln -sfn "$OUT_DIR/bin/nodeadm" "$BIN_DIR/nodeadm"
ln -sfn "$OUT_DIR/bin/nodeadm-check" "$BIN_DIR/nodeadm-check"
echo "$BIN_DIR/nodeadm"
