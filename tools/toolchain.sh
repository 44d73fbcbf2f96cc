#!/usr/bin/env bash
# Build-or-reuse the pinned Pulumi toolchain (no downloads outside the Go module proxy) and expose it in
# <repo>/.tools/bin:
#
#   pulumi                          CLI, github.com/pulumi/pulumi/pkg/v3@v3.276.0 ./cmd/pulumi
#   pulumi-language-python          Python language host: tools/pulumi/cmd/pulumi-language-python (our minimal
#                                   host; upstream's nested module is not served by the proxy, see its main.go)
#   pulumi-language-python-exec     executor script from github.com/pulumi/pulumi/sdk/v3@v3.276.0 python/cmd
#   pulumi-resource-pulumi-python   dynamic-provider shim from the same sdk module (python/dist)
# and, in <repo>/.tools/plugins (kept off $PATH on purpose, see step 5):
#   pulumi-resource-kubernetes      github.com/pulumi/pulumi-kubernetes/provider/v4 (see K8S_* pins below),
#                                   registered in the plugin cache: `pulumi plugin install resource kubernetes`
#
# Binaries are built once per version into ${DYNAMO_TOOLCHAIN_CACHE:-$HOME/.cache/dynamo-pulumi-toolchain}
# (outside the clone); a run with a warm cache only re-creates the .tools/bin symlinks (seconds).
# Build logs: <cache>/<component>/build.log.
#
# Usage:  tools/toolchain.sh            # build/reuse, link, register the kubernetes plugin
#         eval "$(tools/toolchain.sh --env)"   # same, then export PATH and the PULUMI_* settings below
# Stdout: `--env` prints only `export ...` lines; otherwise the last line is the bin dir. Progress goes to stderr.
#
# Recommended environment for running pulumi (what --env exports):
#   PATH=<repo>/.tools/bin:$PATH  PULUMI_SKIP_UPDATE_CHECK=true  PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true
# plus, chosen by the caller: `pulumi login file://<dir>` (or PULUMI_BACKEND_URL) and PULUMI_CONFIG_PASSPHRASE.
set -euo pipefail

# ---- pins ---------------------------------------------------------------------------------------------------------
PULUMI_VERSION=v3.276.0 # pkg/v3 and sdk/v3 (tools/pulumi/go.mod must require the same)
# The proxy serves provider/v4 only as this pseudo-version (upstream tags v4.x.y are on the repo root, not on the
# provider/ module). Commit f47bc2d6f199 (2026-01-15) is the last provider commit before the v4.25.0 release tag
# (sdk/v4.25.0 -> 144dd813, 2026-01-16, same timestamp as the PyPI pulumi-kubernetes 4.25.0 upload), so we stamp
# and register it as 4.25.0 and pin PyPI pulumi-kubernetes==4.25.0.
# Still the newest the proxy builds (checked 2026-12-01): `go list -m -versions .../provider/v4` lists no version,
# @latest is this pseudo-version, and newer commits are refused (`.../provider/v4/@v/<commit>.info` for the
# provider/go.mod commit bb050fd6e174 of the stored index, and @master / @v4.32.0: "This module version is not
# available"), although sdk/v4 is served up to v4.32.0 and PyPI has pulumi-kubernetes 4.34.2.
K8S_PROVIDER_MODULE=github.com/pulumi/pulumi-kubernetes/provider/v4
K8S_PROVIDER_MODVERSION=v4.0.0-20260115033456-f47bc2d6f199
K8S_PROVIDER_VERSION=4.25.0
# The provider's go.mod has `replace .../sdk/v4 => ../sdk` (not in the module zip); use the published release.
K8S_SDK_MODULE=github.com/pulumi/pulumi-kubernetes/sdk/v4
K8S_SDK_VERSION=v4.25.0

MODE=${1:-}
case "$MODE" in
"" | --env) ;;
-h | --help)
	sed -n '2,25p' "$0"
	exit 0
	;;
*)
	echo "usage: $0 [--env]" >&2
	exit 2
	;;
esac

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS_MOD="$REPO/tools/pulumi"
BIN_DIR="$REPO/.tools/bin"
CACHE="${DYNAMO_TOOLCHAIN_CACHE:-$HOME/.cache/dynamo-pulumi-toolchain}"
mkdir -p "$CACHE" "$BIN_DIR"

log() { echo "toolchain: $*" >&2; }
die() {
	echo "toolchain: ERROR: $*" >&2
	exit 1
}

command -v go >/dev/null || die "go not found on PATH"
# -mod=readonly: every build uses the committed go.mod/go.sum (tools/pulumi/go.sum; for the k8s provider its own
# go.sum plus tools/pulumi/kubernetes-provider.go.sum) and fails on a missing entry instead of adding one.
# -buildvcs=false: no git metadata needed/stamped. (Flags are not part of any cache key: built binaries stay valid.)
export GOFLAGS="-mod=readonly -buildvcs=false"
# Never let the go command download a different toolchain behind our back (unless the caller pinned one).
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

# Serialize concurrent runs (e.g. two shells, or CI and a developer) on the shared cache.
if command -v flock >/dev/null; then
	exec 9>"$CACHE/.lock"
	flock 9
fi

sha_of() { cat "$@" | sha256sum | cut -c1-12; }

# run_logged <logfile> <cmd...>: run a build step, appending output to the log; show the tail on failure.
run_logged() {
	local logf=$1
	shift
	echo "+ $*" >>"$logf"
	if ! "$@" >>"$logf" 2>&1; then
		echo "toolchain: ERROR: step failed: $*" >&2
		echo "toolchain: ---- last 30 lines of $logf ----" >&2
		tail -n 30 "$logf" >&2
		exit 1
	fi
}

# timed <component> <function>: run a build function, record its wall time.
timed() {
	local name=$1 fn=$2 t0 t1
	t0=$(date +%s)
	"$fn"
	t1=$(date +%s)
	log "built $name in $((t1 - t0))s"
}

# ---- 1. pulumi CLI ------------------------------------------------------------------------------------------------
CLI_DIR="$CACHE/pulumi-$PULUMI_VERSION"
build_cli() {
	rm -rf "$CLI_DIR"
	mkdir -p "$CLI_DIR/bin"
	local logf="$CLI_DIR/build.log"
	log "building pulumi $PULUMI_VERSION (several minutes on 2 cores; log: $logf)"
	(
		cd "$TOOLS_MOD"
		run_logged "$logf" go build -trimpath \
			-ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$PULUMI_VERSION" \
			-o "$CLI_DIR/bin/pulumi" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi
	)
	touch "$CLI_DIR/.complete"
}
[[ -f "$CLI_DIR/.complete" && -x "$CLI_DIR/bin/pulumi" ]] || timed "pulumi $PULUMI_VERSION" build_cli

# ---- 2. python language host + scripts from the sdk module -------------------------------------------------------
LANGHOST_SRC_HASH=$(sha_of "$TOOLS_MOD/go.mod" "$TOOLS_MOD/go.sum" "$TOOLS_MOD/cmd/pulumi-language-python/main.go")
LANG_DIR="$CACHE/pulumi-language-python-$PULUMI_VERSION-$LANGHOST_SRC_HASH"
build_langhost() {
	rm -rf "$LANG_DIR"
	mkdir -p "$LANG_DIR/bin"
	local logf="$LANG_DIR/build.log" sdk_dir
	(
		cd "$TOOLS_MOD"
		run_logged "$logf" go build -trimpath \
			-ldflags "-s -w -X main.version=${PULUMI_VERSION#v}" \
			-o "$LANG_DIR/bin/pulumi-language-python" ./cmd/pulumi-language-python
	)
	sdk_dir=$(cd "$TOOLS_MOD" && go list -m -f '{{.Dir}}' github.com/pulumi/pulumi/sdk/v3)
	[[ -n "$sdk_dir" && -f "$sdk_dir/python/cmd/pulumi-language-python-exec" ]] ||
		die "pulumi-language-python-exec not found in sdk module dir '$sdk_dir'"
	install -m 0755 "$sdk_dir/python/cmd/pulumi-language-python-exec" "$LANG_DIR/bin/"
	install -m 0755 "$sdk_dir/python/dist/pulumi-resource-pulumi-python" "$LANG_DIR/bin/"
	touch "$LANG_DIR/.complete"
}
[[ -f "$LANG_DIR/.complete" ]] || timed "pulumi-language-python" build_langhost

# ---- 3. kubernetes provider ---------------------------------------------------------------------------------------
K8S_DIR="$CACHE/pulumi-resource-kubernetes-v$K8S_PROVIDER_VERSION"
build_k8s() {
	rm -rf "$K8S_DIR"
	mkdir -p "$K8S_DIR/bin"
	local logf="$K8S_DIR/build.log" moddir src="$K8S_DIR/src"
	log "building pulumi-resource-kubernetes $K8S_PROVIDER_VERSION (several minutes; log: $logf)"
	moddir=$(cd "$CACHE" && go mod download -json "$K8S_PROVIDER_MODULE@$K8S_PROVIDER_MODVERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
	[[ -n "$moddir" && -d "$moddir" ]] || die "could not download $K8S_PROVIDER_MODULE@$K8S_PROVIDER_MODVERSION"
	# Writable copy: the module cache is read-only and the embedded schema must be generated in place.
	cp -r "$moddir" "$src"
	chmod -R u+w "$src"
	(
		cd "$src"
		run_logged "$logf" go mod edit -dropreplace="$K8S_SDK_MODULE" -require="$K8S_SDK_MODULE@$K8S_SDK_VERSION"
		# The provider's go.sum has no entries for the sdk release that replaces `../sdk`; they are committed
		# (recorded once with -mod=mod, which checks them against sum.golang.org), so the build stays read-only.
		cat "$TOOLS_MOD/kubernetes-provider.go.sum" >>go.sum
		# Upstream Makefile: `cd provider/cmd/pulumi-resource-kubernetes && VERSION=... go generate` which runs
		# generate.go -> schema-embed.json (schema.json with .version set) + terraform-mapping-embed.json.
		cd cmd/pulumi-resource-kubernetes
		run_logged "$logf" env VERSION="$K8S_PROVIDER_VERSION" go run ./generate.go
		[[ -s schema-embed.json && -s terraform-mapping-embed.json ]] || die "schema embed generation failed ($logf)"
		cd ../..
		run_logged "$logf" go build -trimpath \
			-ldflags "-s -w -X $K8S_PROVIDER_MODULE/pkg/version.Version=$K8S_PROVIDER_VERSION" \
			-o "$K8S_DIR/bin/pulumi-resource-kubernetes" ./cmd/pulumi-resource-kubernetes
	)
	rm -rf "$src" # ~100 MB of sources; the binary is what we cache
	touch "$K8S_DIR/.complete"
}
[[ -f "$K8S_DIR/.complete" && -x "$K8S_DIR/bin/pulumi-resource-kubernetes" ]] ||
	timed "pulumi-resource-kubernetes $K8S_PROVIDER_VERSION" build_k8s

# ---- 4. bundle: pulumi looks for bundled language plugins next to its *resolved* executable, so the CLI and the
# python host must share one real directory (hard links, falling back to copies).
BUNDLE_DIR="$CACHE/bundle-pulumi-$PULUMI_VERSION-langpy-$LANGHOST_SRC_HASH"
if [[ ! -f "$BUNDLE_DIR/.complete" ]]; then
	rm -rf "$BUNDLE_DIR"
	mkdir -p "$BUNDLE_DIR/bin"
	for f in "$CLI_DIR"/bin/* "$LANG_DIR"/bin/*; do
		ln "$f" "$BUNDLE_DIR/bin/" 2>/dev/null || cp -p "$f" "$BUNDLE_DIR/bin/"
	done
	touch "$BUNDLE_DIR/.complete"
fi

# ---- 5. repo-local bin dir (symlinks; recreated in every fresh clone) -----------------------------------------------
# The provider deliberately stays OFF $PATH: the engine prefers any pulumi-resource-* found on $PATH over the plugin
# cache and warns "using pulumi-resource-kubernetes from $PATH" on every operation. It is linked into
# .tools/plugins for reference and loaded by the engine from the plugin cache (step 6).
PLUGINS_DIR="$REPO/.tools/plugins"
mkdir -p "$PLUGINS_DIR"
rm -f "$BIN_DIR/pulumi-resource-kubernetes" # left by older versions of this script
for f in "$BUNDLE_DIR"/bin/*; do ln -sfn "$f" "$BIN_DIR/$(basename "$f")"; done
ln -sfn "$K8S_DIR/bin/pulumi-resource-kubernetes" "$PLUGINS_DIR/pulumi-resource-kubernetes"

# ---- 6. register the kubernetes provider in the plugin cache ($PULUMI_HOME/plugins) --------------------------------
export PULUMI_SKIP_UPDATE_CHECK=true
export PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true
PULUMI="$BIN_DIR/pulumi"
if ! "$PULUMI" plugin ls 2>/dev/null |
	awk -v v="$K8S_PROVIDER_VERSION" '$1 == "kubernetes" && $2 == "resource" && ($3 == v || $3 == "v" v) {f=1} END {exit !f}'; then
	log "registering resource plugin kubernetes $K8S_PROVIDER_VERSION"
	"$PULUMI" plugin install resource kubernetes "$K8S_PROVIDER_VERSION" \
		--file "$K8S_DIR/bin/pulumi-resource-kubernetes" >&2
fi

log "ready: pulumi $("$PULUMI" version), kubernetes provider $K8S_PROVIDER_VERSION, bin dir $BIN_DIR"
if [[ "$MODE" == "--env" ]]; then
	# shellcheck disable=SC2016 # $PATH must expand in the caller's shell
	printf 'export PATH=%q:"$PATH"\n' "$BIN_DIR"
	echo "export PULUMI_SKIP_UPDATE_CHECK=true"
	echo "export PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true"
else
	echo "$BIN_DIR"
fi
