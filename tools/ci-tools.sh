#!/usr/bin/env bash
# Install what the CI jobs download, each one verified against a pin before it runs. The pins live in the
# `toolchain:` section of stacks/registry/versions.yaml (read here; tests/test_workflows.py checks that the workflows
# install nothing any other way):
#
#   tools/ci-tools.sh go            Go ci-go: the toolchain module golang.org/toolchain@v0.0.1-go<ver>.linux-amd64
#                                   from the Go module proxy, which the go command checks against the checksum
#                                   database (sum.golang.org) before it runs it. The Go that starts the switch is
#                                   the runner's own, or Ubuntu's golang-go (apt checks its signed archive).
#   tools/ci-tools.sh uv            uv ci-uv from PyPI into <cache>/uv-<ver> (the Makefile's path, so `make` reuses
#                                   it): pip --require-hashes against ci-uv-sha256.
#   tools/ci-tools.sh pulumi STACK  The Pulumi CLI, Python language host and Kubernetes provider, built from the Go
#                                   module proxy by tools/toolchain.sh (go.sum and GOSUMDB check every module);
#                                   automatic plugin downloads off; and, for a stack whose cluster.mode reaches AWS
#                                   (eks, stack), the AWS provider plugin by `pulumi plugin install --checksum`
#                                   against pulumi-aws-plugin-sha256. Refuses when that pin is not recorded.
#
# In GitHub Actions each command adds what it installed to $GITHUB_PATH / $GITHUB_ENV for the later steps.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${DYNAMO_TOOLCHAIN_CACHE:-$HOME/.cache/dynamo-pulumi-toolchain}"
VERSIONS="$ROOT/stacks/registry/versions.yaml"

die() { echo "ci-tools.sh: $*" >&2; exit 1; }
log() { echo "ci-tools.sh: $*" >&2; }
# A flat `  key: value` line of versions.yaml's toolchain section (quotes and a trailing comment dropped).
pin() {
  sed -n '/^toolchain:/,/^[^ #]/p' "$VERSIONS" | sed -nE "s/^  $1: *\"?([^\"#[:space:]]*)\"?.*/\1/p" | head -n 1
}
add_path() { if [[ -n "${GITHUB_PATH:-}" ]]; then echo "$1" >>"$GITHUB_PATH"; fi; }
add_env() { if [[ -n "${GITHUB_ENV:-}" ]]; then echo "$1=$2" >>"$GITHUB_ENV"; fi; }

install_go() {
  local want go
  want="$(pin ci-go)"
  [[ -n "$want" ]] || die "no ci-go pin in $VERSIONS"
  go="$(command -v go || true)"
  if [[ -z "$go" ]]; then
    log "no go on the runner: Ubuntu's golang-go starts the switch (apt checks the archive's signature)"
    sudo apt-get install -y -qq golang-go >/dev/null
    go="$(command -v go)"
  fi
  # The module proxy and the checksum database, whatever the runner's environment says: a toolchain the database
  # does not record is refused.
  local goroot
  goroot="$(env GOTOOLCHAIN="go$want" GOPROXY=https://proxy.golang.org GOSUMDB=sum.golang.org \
    GONOSUMDB= GOPRIVATE= GOINSECURE= GOFLAGS= "$go" env GOROOT)"
  [[ "$("$goroot/bin/go" env GOVERSION)" == "go$want" ]] || die "$goroot/bin/go is not go$want"
  log "go$want at $goroot"
  add_path "$goroot/bin"
  echo "$goroot/bin"
}

install_uv() {
  local ver sha wheel dir req
  ver="$(pin ci-uv)" sha="$(pin ci-uv-sha256)"
  [[ -n "$ver" && "$sha" =~ ^[0-9a-f]{64}$ ]] || die "no ci-uv / ci-uv-sha256 pin in $VERSIONS"
  dir="$CACHE/uv-$ver"
  rm -rf "$dir"
  python3 -m venv "$dir"
  req="$(mktemp)"
  printf 'uv==%s --hash=sha256:%s\n' "$ver" "$sha" >"$req"
  "$dir/bin/pip" install --quiet --disable-pip-version-check --no-deps --only-binary :all: --require-hashes -r "$req"
  rm -f "$req"
  [[ "$("$dir/bin/uv" --version)" == "uv $ver"* ]] || die "$dir/bin/uv is not uv $ver"
  log "uv $ver at $dir/bin"
  add_path "$dir/bin"
  echo "$dir/bin"
}

aws_plugin() {
  local ver sha
  ver="$(pin pulumi-aws-plugin)" sha="$(pin pulumi-aws-plugin-sha256)"
  [[ -n "$ver" ]] || die "no pulumi-aws-plugin pin in $VERSIONS"
  if [[ ! "$sha" =~ ^[0-9a-f]{64}$ ]]; then
    die "refusing to download the AWS provider plugin $ver without a checksum: record pulumi-aws-plugin-sha256 in" \
      "stacks/registry/versions.yaml (the pulumi-resource-aws-v$ver-linux-amd64.tar.gz line of" \
      "pulumi-aws_${ver}_checksums.txt in the pulumi/pulumi-aws v$ver release; docs/ci.md)"
  fi
  pulumi plugin install resource aws "$ver" --checksum "$sha"
}

install_pulumi() {
  local stack="${1:-}" mode bin want
  [[ -n "$stack" ]] || die "usage: $0 pulumi STACK"
  export PULUMI_SKIP_UPDATE_CHECK=true PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true
  add_env PULUMI_SKIP_UPDATE_CHECK true
  add_env PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION true
  bin="$("$ROOT/tools/toolchain.sh" | tail -n 1)"
  export PATH="$bin:$PATH"
  add_path "$bin"
  want="$(pin pulumi)"
  [[ "$(pulumi version)" == "$want" ]] || die "pulumi on the PATH is $(pulumi version), not $want"
  mode="$(cd "$ROOT" && "${PYTHON:-.venv/bin/python}" .github/stack_kind.py mode "$stack" | sed -n 's/^mode=//p')"
  case "$mode" in
  eks | stack) aws_plugin ;;
  render | kubeconfig) log "$stack ($mode) needs no AWS provider plugin" ;;
  *) die "unknown cluster.mode '$mode' for $stack" ;;
  esac
}

case "${1:-}" in
go) install_go ;;
uv) install_uv ;;
pulumi) install_pulumi "${2:-}" ;;
*) sed -n '2,19p' "$0" >&2; exit 2 ;;
esac
