#!/usr/bin/env bash
# karpenter.sh: the real Karpenter core with its KWOK cloud provider, for the simulated cluster's engine tests.
#
# Builds (or reuses from the cache) the `kwok` main package of sigs.k8s.io/karpenter (kwok/main.go: the Karpenter
# operator and controllers with a cloud provider that launches KWOK nodes for its NodeClaims) and copies the CRDs of
# the same module version next to it: NodePool, NodeClaim and NodeOverlay (kwok/charts/crds) and the KWOKNodeClass
# (kwok/apis/crds). The binary runs against tools/kube-local.sh's control plane (stacks/cli/karpenter_sim.py starts it).
#
# Usage: tools/karpenter.sh build|path|crds
#   build   build or reuse <cache>/karpenter-<ver>/karpenter and <cache>/karpenter-<ver>/crds/*.yaml
#   path    print the binary's path (exit 1 when not built)
#   crds    print the CRD directory (exit 1 when not built)
#
# Environment: DYNAMO_TOOLCHAIN_CACHE (default $HOME/.cache/dynamo-pulumi-toolchain).
# The version is pinned by tools/karpenter/go.mod (stacks/registry/versions.yaml toolchain.karpenter carries the same pin);
# it builds from the Go module proxy with -mod=readonly against the committed go.sum. v1.13.0, the core of the pinned
# EKS chart (charts.karpenter.core): newer releases need a newer Go than 1.26.8 (go.mod: v1.14.3 go 1.26.10, v1.15.0 go 1.26.9).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MOD_DIR="$SCRIPT_DIR/karpenter"
CACHE_DIR="${DYNAMO_TOOLCHAIN_CACHE:-$HOME/.cache/dynamo-pulumi-toolchain}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

log() { printf '[karpenter] %s\n' "$*" >&2; }
die() { printf '[karpenter] ERROR: %s\n' "$*" >&2; exit 1; }

VERSION="$(awk '$1 == "require" && $2 == "sigs.k8s.io/karpenter" { print $3; exit } $1 == "sigs.k8s.io/karpenter" { print $2; exit }' "$MOD_DIR/go.mod")"
[[ -n "$VERSION" ]] || die "cannot read the sigs.k8s.io/karpenter pin from $MOD_DIR/go.mod"
OUT_DIR="$CACHE_DIR/karpenter-$VERSION"
BIN="$OUT_DIR/karpenter"
CRD_DIR="$OUT_DIR/crds"
# The CRDs the KWOK provider needs, as shipped in the pinned module.
CRDS=(kwok/charts/crds/karpenter.sh_nodepools.yaml kwok/charts/crds/karpenter.sh_nodeclaims.yaml
  kwok/charts/crds/karpenter.sh_nodeoverlays.yaml kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml)

built() { [[ -x "$BIN" && -s "$CRD_DIR/karpenter.kwok.sh_kwoknodeclasses.yaml" ]]; }

cmd_build() {
  command -v go >/dev/null || die "go is not installed"
  mkdir -p "$CACHE_DIR"
  exec 9>"$CACHE_DIR/.karpenter-build.lock"
  flock 9
  if ! [[ -x "$BIN" ]]; then
    local tmp="$BIN.tmp.$$" t0=$SECONDS
    mkdir -p "$OUT_DIR"
    log "building sigs.k8s.io/karpenter/kwok $VERSION -> $BIN (first build takes several minutes)"
    # -mod=readonly: the committed go.mod/go.sum decide every module version.
    (cd "$MOD_DIR" && go build -mod=readonly -trimpath -ldflags="-s -w" -o "$tmp" sigs.k8s.io/karpenter/kwok) \
      || { rm -f "$tmp"; die "go build sigs.k8s.io/karpenter/kwok failed"; }
    mv -f "$tmp" "$BIN"
    log "built karpenter $VERSION in $((SECONDS - t0))s"
  fi
  if ! [[ -s "$CRD_DIR/karpenter.kwok.sh_kwoknodeclasses.yaml" ]]; then
    local src f
    src="$(cd "$MOD_DIR" && go list -mod=readonly -m -f '{{.Dir}}' sigs.k8s.io/karpenter)" && [[ -d "$src/kwok" ]] \
      || die "cannot find the sigs.k8s.io/karpenter@$VERSION module source"
    mkdir -p "$CRD_DIR.tmp.$$"
    for f in "${CRDS[@]}"; do
      [[ -f "$src/$f" ]] || { rm -rf "$CRD_DIR.tmp.$$"; die "karpenter $VERSION has no $f"; }
      cp "$src/$f" "$CRD_DIR.tmp.$$/"
    done
    chmod -R u+w "$CRD_DIR.tmp.$$"
    rm -rf "$CRD_DIR"
    mv "$CRD_DIR.tmp.$$" "$CRD_DIR"
  fi
  flock -u 9
  log "karpenter $VERSION: $BIN (CRDs: $CRD_DIR)"
}

case "${1:-}" in
  build) cmd_build ;;
  path) built || exit 1; echo "$BIN" ;;
  crds) built || exit 1; echo "$CRD_DIR" ;;
  *) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2 ;;
esac
