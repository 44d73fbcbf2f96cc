#!/usr/bin/env bash
# kube-local.sh: a real, local Kubernetes control plane for engine tests.
#
# etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok on 127.0.0.1, no
# kubelet: objects are stored, validated (OpenAPI/CRD schemas, admission) and garbage-collected.
# The cluster starts with no nodes, so no Pod is ever scheduled and no Job completes. Nodes are
# only added on request (`python -m stacks simulate`, the simulated-cluster engine tests): KWOK
# nodes, annotated kwok.x-k8s.io/node=fake, which the real kube-scheduler binds pods to and
# kwok's default stages (from the pinned kwok release) move along: nodes Ready, bound pods
# Running, Job pods Succeeded, deleted pods gone.
#
# Usage: tools/kube-local.sh build|start|stop|restart|status|env|reset
#   build    build (or reuse from the cache) etcd, kube-apiserver, kube-controller-manager,
#            kube-scheduler, kwok (+ kwok's default stages) and kubectl (linked into
#            <repo>/.tools/bin, which the Makefile puts first on PATH)
#   start    build if needed, start everything, write $KUBE_LOCAL_DIR/kubeconfig, install
#            the Dynamo CRDs and wait until they are Established. No-op if already running.
#   stop     stop all processes (pid files), keeping the state (certs, etcd data)
#   restart  stop + start
#   status   print what is running; exit 0 only if the apiserver is ready
#   env      print `export KUBECONFIG=...` (use: eval "$(tools/kube-local.sh env)")
#   reset    stop and delete the state dir (next start begins with an empty cluster)
#   pin v1.X.Y [v3.X.Y]  re-pin tools/kube/go.mod (+ etcd/go.mod) to another Kubernetes
#            release (etcd defaults to the etcd server version that release depends on)
#
# Environment:
#   DYNAMO_TOOLCHAIN_CACHE  binary cache (default $HOME/.cache/dynamo-pulumi-toolchain);
#                           binaries live in <cache>/<tool>-<version>/<tool>
#   KUBE_LOCAL_DIR          state dir: certs, kubeconfig, etcd data, logs/, pids
#                           (default <repo>/.tools/kube)
#   DYNAMO_REFERENCE        reference dir whose crds/*.yaml are installed
#                           (default <repo>/../shared/reference)
#   KUBE_LOCAL_SKIP_CRDS=1  do not install the CRDs
#   KUBE_LOCAL_CRDS         only these CRDs (metadata.name, space-separated) of crds/*.yaml
#                           (default: all); each is still checked to be in the reference
#   KUBE_LOCAL_CRD_CONVERSION=none  patch the CRDs' v1alpha1<->v1beta1 conversion webhook
#                           (the Dynamo operator, absent here) to strategy None; default
#                           "webhook" keeps the reference CRDs as they are, so any v1alpha1
#                           request for a v1beta1-stored object fails as on a cluster whose
#                           operator is down
#   KUBE_LOCAL_NO_KCM=1     do not run kube-controller-manager (then namespace deletion,
#                           PVC deletion and foreground deletion never finish)
#   KUBE_LOCAL_NODE=1       also start one real node (tools/kube-node.sh: containerd, runc, CNI, kubelet,
#                           kube-proxy; Linux and root); `stop` stops it whenever one was started
#   KUBE_LOCAL_NO_SIM=1     do not build or run kube-scheduler and kwok (the control plane of
#                           before: nothing binds pods even when nodes exist)
#   KUBE_LOCAL_PORT         apiserver port (default: a free port, kept across restarts)
#   KUBE_LOCAL_START_TIMEOUT  seconds to wait for readiness (default 90)
#   KUBECTL                 kubectl to use (default: the pinned kubectl once built, else kubectl on PATH)
#
# Versions are pinned by tools/kube/go.mod (k8s.io/kubernetes: the control plane and kubectl),
# tools/kube/etcd/go.mod (go.etcd.io/etcd/server/v3) and tools/kube/kwok/go.mod (sigs.k8s.io/kwok);
# all build from the Go module proxy with -mod=readonly against the committed go.sum files.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
MOD_DIR="$SCRIPT_DIR/kube"
CACHE_DIR="${DYNAMO_TOOLCHAIN_CACHE:-$HOME/.cache/dynamo-pulumi-toolchain}"
STATE_DIR="${KUBE_LOCAL_DIR:-$REPO_ROOT/.tools/kube}"
REFERENCE_DIR="${DYNAMO_REFERENCE:-$REPO_ROOT/../shared/reference}"
START_TIMEOUT="${KUBE_LOCAL_START_TIMEOUT:-90}"

# Use the machine's Go; a pin that needs a newer one must set GOTOOLCHAIN explicitly.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

log() { printf '[kube-local] %s\n' "$*" >&2; }
die() { printf '[kube-local] ERROR: %s\n' "$*" >&2; exit 1; }

mod_version() { # <go.mod> <module path>: the required version of a module
  awk -v m="$2" '$0 !~ /=>/ && $1 == m { print $2; exit } $0 !~ /=>/ && $1 == "require" && $2 == m { print $3; exit }' "$1"
}

K8S_VERSION="$(mod_version "$MOD_DIR/go.mod" k8s.io/kubernetes)"
ETCD_VERSION="$(mod_version "$MOD_DIR/etcd/go.mod" go.etcd.io/etcd/server/v3)"
KWOK_VERSION="$(mod_version "$MOD_DIR/kwok/go.mod" sigs.k8s.io/kwok)"
[[ -n "$K8S_VERSION" && -n "$ETCD_VERSION" && -n "$KWOK_VERSION" ]] \
  || die "cannot read pinned versions from $MOD_DIR/go.mod, $MOD_DIR/etcd/go.mod, $MOD_DIR/kwok/go.mod"

APISERVER_BIN="$CACHE_DIR/kube-apiserver-$K8S_VERSION/kube-apiserver"
KCM_BIN="$CACHE_DIR/kube-controller-manager-$K8S_VERSION/kube-controller-manager"
ETCD_BIN="$CACHE_DIR/etcd-$ETCD_VERSION/etcd"
SCHED_BIN="$CACHE_DIR/kube-scheduler-$K8S_VERSION/kube-scheduler"
KWOK_BIN="$CACHE_DIR/kwok-$KWOK_VERSION/kwok"
KUBECTL_BIN="$CACHE_DIR/kubectl-$K8S_VERSION/kubectl"
# The pinned kubectl (same release as the API server) once built; otherwise the one on PATH.
if [[ -z "${KUBECTL:-}" ]]; then
  if [[ -x "$KUBECTL_BIN" ]]; then KUBECTL="$KUBECTL_BIN"; else KUBECTL=kubectl; fi
fi
# kwok's own default stages (kustomize/stage in the kwok module), copied next to the binary.
KWOK_STAGES="$CACHE_DIR/kwok-$KWOK_VERSION/stages.yaml"
sim_wanted() { [[ "${KUBE_LOCAL_NO_SIM:-0}" != 1 ]]; }

# ---------------------------------------------------------------- build
go_build() { # <module dir> <package> <output> [ldflags]
  local dir="$1" pkg="$2" out="$3" ldflags="${4:-}"
  local tmp="$out.tmp.$$"
  mkdir -p "$(dirname "$out")"
  log "building $pkg -> $out (first build takes several minutes)"
  local t0=$SECONDS
  # -mod=readonly: the committed go.mod/go.sum decide every module version; a missing go.sum entry fails the
  # build instead of being added (the flag overrides any -mod in $GOFLAGS; it is not part of the cache path).
  (cd "$dir" && go build -mod=readonly -trimpath -ldflags="-s -w $ldflags" -o "$tmp" "$pkg") \
    || { rm -f "$tmp"; die "go build $pkg failed"; }
  mv -f "$tmp" "$out"
  log "built $(basename "$out") in $((SECONDS - t0))s"
}

k8s_ldflags() {
  local v="$K8S_VERSION" major minor flags="" p
  major="${v#v}"; major="${major%%.*}"
  minor="${v#v*.}"; minor="${minor%%.*}"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $p.gitVersion=$v -X $p.gitMajor=$major -X $p.gitMinor=$minor"
    flags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  printf '%s' "$flags"
}

cmd_build() {
  command -v go >/dev/null || die "go is not installed"
  mkdir -p "$CACHE_DIR"
  # One build at a time per cache (several clones or CI jobs may share the cache).
  exec 9>"$CACHE_DIR/.kube-local-build.lock"
  flock 9
  [[ -x "$ETCD_BIN" ]] || go_build "$MOD_DIR/etcd" go.etcd.io/etcd/server/v3 "$ETCD_BIN"
  [[ -x "$APISERVER_BIN" ]] || go_build "$MOD_DIR" k8s.io/kubernetes/cmd/kube-apiserver "$APISERVER_BIN" "$(k8s_ldflags)"
  if [[ "${KUBE_LOCAL_NO_KCM:-0}" != 1 ]]; then
    [[ -x "$KCM_BIN" ]] || go_build "$MOD_DIR" k8s.io/kubernetes/cmd/kube-controller-manager "$KCM_BIN" "$(k8s_ldflags)"
  fi
  if sim_wanted; then
    [[ -x "$SCHED_BIN" ]] || go_build "$MOD_DIR" k8s.io/kubernetes/cmd/kube-scheduler "$SCHED_BIN" "$(k8s_ldflags)"
    [[ -x "$KWOK_BIN" ]] || go_build "$MOD_DIR/kwok" sigs.k8s.io/kwok/cmd/kwok "$KWOK_BIN" "-X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION"
    [[ -s "$KWOK_STAGES" ]] || copy_kwok_stages
  fi
  [[ -x "$KUBECTL_BIN" ]] || go_build "$MOD_DIR" k8s.io/kubernetes/cmd/kubectl "$KUBECTL_BIN" "$(k8s_ldflags)"
  flock -u 9
  mkdir -p "$REPO_ROOT/.tools/bin"
  ln -sfn "$KUBECTL_BIN" "$REPO_ROOT/.tools/bin/kubectl"
  log "etcd $ETCD_VERSION: $ETCD_BIN"
  log "kube-apiserver $K8S_VERSION: $APISERVER_BIN"
  [[ "${KUBE_LOCAL_NO_KCM:-0}" == 1 ]] || log "kube-controller-manager $K8S_VERSION: $KCM_BIN"
  log "kubectl $K8S_VERSION: $KUBECTL_BIN (linked as $REPO_ROOT/.tools/bin/kubectl)"
  sim_wanted || return 0
  log "kube-scheduler $K8S_VERSION: $SCHED_BIN"
  log "kwok $KWOK_VERSION: $KWOK_BIN (stages: $KWOK_STAGES)"
}

copy_kwok_stages() { # kwok's default "fast" stages, as kwokctl configures them, from the pinned module
  local dir tmp="$KWOK_STAGES.tmp.$$" f
  dir="$(cd "$MOD_DIR/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)" && [[ -d "$dir/kustomize/stage" ]] \
    || die "cannot find the sigs.k8s.io/kwok@$KWOK_VERSION module source"
  : >"$tmp"
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
    pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    [[ -f "$dir/kustomize/stage/$f" ]] || { rm -f "$tmp"; die "kwok $KWOK_VERSION has no kustomize/stage/$f"; }
    { echo "---"; echo "# sigs.k8s.io/kwok@$KWOK_VERSION kustomize/stage/$f"; cat "$dir/kustomize/stage/$f"; } >>"$tmp"
  done
  mv -f "$tmp" "$KWOK_STAGES"
}

# ---------------------------------------------------------------- pin
gomod_of() { # <module@version>: path of its go.mod in the module cache (downloads it)
  local dir
  dir="$(mktemp -d)"
  (cd "$dir" && go mod download -json "$1") | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p'
  rmdir "$dir"
}

cmd_pin() { # <k8s version> [etcd version]: rewrite tools/kube/go.mod and tools/kube/etcd/go.mod
  local k8s="${1:-}" etcd="${2:-}" kmod emod minor patch gover
  [[ "$k8s" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || die "usage: $0 pin v1.X.Y [v3.X.Y]"
  minor="${BASH_REMATCH[1]}" patch="${BASH_REMATCH[2]}"
  kmod="$(gomod_of "k8s.io/kubernetes@$k8s")"
  [[ -f "$kmod" ]] || die "k8s.io/kubernetes@$k8s is not available from the module proxy"
  # Default etcd: the server version that this Kubernetes release itself depends on.
  [[ -n "$etcd" ]] || etcd="$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2; exit }' "$kmod")"
  emod="$(gomod_of "go.etcd.io/etcd/server/v3@$etcd")"
  [[ -f "$emod" ]] || die "go.etcd.io/etcd/server/v3@$etcd is not available from the module proxy"

  gover="$(awk '$1 == "go" { print $2; exit }' "$kmod")"
  {
    echo "// Tools module that pins and builds kube-apiserver, kube-controller-manager, kube-scheduler and kubectl for"
    echo "// tools/kube-local.sh; not part of the product. Generated by: tools/kube-local.sh pin $k8s"
    echo "// k8s.io/kubernetes replaces its staging modules with ./staging paths; they are pinned"
    echo "// here to the published k8s.io/* v0.$minor.$patch modules instead."
    echo "module dynamo-pulumi/tools/kube"
    echo
    echo "go $gover"
    echo
    echo "tool ("
    echo "	k8s.io/kubernetes/cmd/kube-apiserver"
    echo "	k8s.io/kubernetes/cmd/kube-controller-manager"
    echo "	k8s.io/kubernetes/cmd/kube-scheduler"
    echo "	k8s.io/kubernetes/cmd/kubectl"
    echo ")"
    echo
    echo "require k8s.io/kubernetes $k8s"
    echo
    echo "replace ("
    awk -v v="v0.$minor.$patch" '$2 == "=>" && $3 ~ /^\.\/staging\// { print "\t" $1 " => " $1 " " v }' "$kmod"
    echo ")"
  } >"$MOD_DIR/go.mod"
  rm -f "$MOD_DIR/go.sum"
  (cd "$MOD_DIR" && go mod tidy) || die "go mod tidy failed in $MOD_DIR"

  gover="$(awk '$1 == "go" { print $2; exit }' "$emod")"
  {
    echo "// Tools module that pins and builds etcd for tools/kube-local.sh; not part of the product."
    echo "// Generated by: tools/kube-local.sh pin $k8s $etcd"
    echo "// go.etcd.io/etcd/server/v3 replaces its sibling modules with ../ paths; they are pinned"
    echo "// here to the versions that its go.mod requires."
    echo "module dynamo-pulumi/tools/kube/etcd"
    echo
    echo "go $gover"
    echo
    echo "tool go.etcd.io/etcd/server/v3"
    echo
    echo "require go.etcd.io/etcd/server/v3 $etcd"
    echo
    echo "replace ("
    awk '$1 ~ /^go\.etcd\.io\// && NF >= 2 && $2 ~ /^v/ { req[$1] = $2 }
         $2 == "=>" && $3 ~ /^\.\.\// { rep[++n] = $1 }
         END { for (i = 1; i <= n; i++) if (rep[i] in req) print "\t" rep[i] " => " rep[i] " " req[rep[i]] }' "$emod"
    echo ")"
  } >"$MOD_DIR/etcd/go.mod"
  rm -f "$MOD_DIR/etcd/go.sum"
  (cd "$MOD_DIR/etcd" && go mod tidy) || die "go mod tidy failed in $MOD_DIR/etcd"
  log "pinned kube-apiserver $k8s and etcd $etcd; run: $0 build"
}

# ---------------------------------------------------------------- helpers
pid_alive() { # <name>: the pid in <name>.pid runs binary <name> (guards against pid reuse)
  local f="$STATE_DIR/$1.pid" pid exe
  [[ -f "$f" ]] || return 1
  pid="$(cat "$f")"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
  exe="$(readlink "/proc/$pid/exe" 2>/dev/null)" || return 0
  [[ "${exe% (deleted)}" == */"$1" ]]
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

pick_port() { # <previous port or empty>: reuse it if free, else a new free port
  if [[ -n "${1:-}" ]] && port_free "$1"; then echo "$1"; else free_port; fi
}

readyz() { # exit 0 if the apiserver answers /readyz with ok
  [[ -f "$STATE_DIR/ports.env" ]] || return 1
  # shellcheck disable=SC1091
  source "$STATE_DIR/ports.env"
  curl -fsS --max-time 2 --cacert "$STATE_DIR/pki/ca.crt" \
    --cert "$STATE_DIR/pki/admin.crt" --key "$STATE_DIR/pki/admin.key" \
    "https://127.0.0.1:$APISERVER_PORT/readyz" >/dev/null 2>&1
}

gen_certs() {
  local pki="$STATE_DIR/pki"
  [[ -f "$pki/admin.crt" ]] && return 0
  log "generating certificates in $pki"
  mkdir -p "$pki"
  (
    cd "$pki"
    umask 077
    # ECDSA P-256 keys: generated in milliseconds, accepted by all components.
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 -sha256 \
      -keyout ca.key -out ca.crt -subj "/CN=kube-local-ca" \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
    sign() { # <name> <subject> <extfile contents>
      openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
      printf '%s\n' "$3" >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
        -days 3650 -sha256 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    sign apiserver "/CN=kube-apiserver" \
      "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    sign admin "/O=system:masters/CN=kube-local-admin" \
      "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out sa.key 2>/dev/null
    openssl pkey -in sa.key -pubout -out sa.pub 2>/dev/null
    rm -f ca.srl
  )
}

write_kubeconfig() { # <file> <port>
  local tmp="$1.tmp.$$"
  cat >"$tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kube-local
  cluster:
    server: https://127.0.0.1:$2
    certificate-authority-data: $(base64 -w0 "$STATE_DIR/pki/ca.crt")
users:
- name: kube-local-admin
  user:
    client-certificate-data: $(base64 -w0 "$STATE_DIR/pki/admin.crt")
    client-key-data: $(base64 -w0 "$STATE_DIR/pki/admin.key")
contexts:
- name: kube-local
  context:
    cluster: kube-local
    user: kube-local-admin
current-context: kube-local
EOF
  chmod 600 "$tmp"
  mv -f "$tmp" "$1"
}

start_proc() { # <name> <binary> args...: start detached, log to logs/<name>.log, pid file
  local name="$1"; shift
  # setsid: own session, so a Ctrl-C in the caller's terminal does not kill it.
  # 8>&- 9>&-: the daemons must not inherit (and so hold) this script's lock files.
  setsid "$@" >>"$STATE_DIR/logs/$name.log" 2>&1 </dev/null 8>&- 9>&- &
  echo $! >"$STATE_DIR/$name.pid"
}

stop_proc() { # <name>
  local f="$STATE_DIR/$1.pid" pid i
  [[ -f "$f" ]] || return 0
  pid="$(cat "$f")"
  if pid_alive "$1"; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      log "$1 (pid $pid) did not stop in 10s; killing"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    log "stopped $1 (pid $pid)"
  fi
  rm -f "$f"
}

elapsed() { local now=${EPOCHREALTIME/./}; printf '%d.%01ds' $(((now - T0US) / 1000000)) $(((now - T0US) % 1000000 / 100000)); }

wait_for() { # <description> <timeout s> <command...>
  local what="$1" timeout="$2"; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.05
  done
  log "$what after $(elapsed)"
}

default_sa_exists() {
  curl -fsS --max-time 2 --cacert "$STATE_DIR/pki/ca.crt" \
    --cert "$STATE_DIR/pki/admin.crt" --key "$STATE_DIR/pki/admin.key" \
    "https://127.0.0.1:$APISERVER_PORT/api/v1/namespaces/default/serviceaccounts/default" >/dev/null 2>&1
}

etcd_healthy() {
  curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_CLIENT_PORT/health" 2>/dev/null | grep -q '"health":"true"'
}

fail_with_log() { # <name> <message>
  log "$2; last lines of $STATE_DIR/logs/$1.log:"
  tail -n 30 "$STATE_DIR/logs/$1.log" >&2 || true
  cmd_stop || true
  exit 1
}

# ---------------------------------------------------------------- start/stop
crds_established() { # <crd names...>: exit 0 when every CRD is Established
  # (No jsonpath filter: kubectl fails on a CRD whose status has no conditions yet, and so
  # does `kubectl wait --for=condition=Established`.)
  local out
  # shellcheck disable=SC2016 # a Go template, not shell
  out="$(KUBECONFIG="$STATE_DIR/kubeconfig" "$KUBECTL" get crd "$@" \
    -o go-template='{{range .items}}{{$n := .metadata.name}}{{range .status.conditions}}{{if eq .type "Established"}}{{$n}}={{.status}}{{"\n"}}{{end}}{{end}}{{end}}' 2>/dev/null)" \
    || return 1
  [[ "$(grep -c '=True$' <<<"$out")" -eq $# ]]
}

crds_served() { # exit 0 when every endpoint in crds.endpoints (group/version/plural) answers
  # A cheap probe: a list with limit=1 instead of fetching the (megabyte-sized) CRDs.
  local ep
  while read -r ep; do
    [[ -n "$ep" ]] || continue
    curl -fsS -o /dev/null --max-time 2 --cacert "$STATE_DIR/pki/ca.crt" \
      --cert "$STATE_DIR/pki/admin.crt" --key "$STATE_DIR/pki/admin.key" \
      "https://127.0.0.1:$APISERVER_PORT/apis/$ep?limit=1" 2>/dev/null || return 1
  done <"$STATE_DIR/crds.endpoints"
}

check_crd_source() { # the Dynamo CRDs come from the reference data beside the clone: fail in one line without them
  [[ "${KUBE_LOCAL_SKIP_CRDS:-0}" == 1 ]] && return 0
  compgen -G "$REFERENCE_DIR/crds/*.yaml" >/dev/null \
    || die "no Dynamo CRDs in $REFERENCE_DIR/crds: they come from the reference data beside this clone (../shared/reference/crds, or DYNAMO_REFERENCE=<dir with crds/*.yaml>); KUBE_LOCAL_SKIP_CRDS=1 starts without them"
}

install_crds() {
  [[ "${KUBE_LOCAL_SKIP_CRDS:-0}" == 1 ]] && return 0
  local crd_dir="$REFERENCE_DIR/crds" f i sum names=() pids=()
  shopt -s nullglob
  local files=("$crd_dir"/*.yaml)
  shopt -u nullglob
  ((${#files[@]})) || die "no CRDs in $crd_dir (set DYNAMO_REFERENCE or KUBE_LOCAL_SKIP_CRDS=1)"
  local all=("${files[@]}") name wanted=" ${KUBE_LOCAL_CRDS:-} " n
  files=()
  for f in "${all[@]}"; do
    name="$(awk '/^metadata:/ {m=1; next} m && /^  name:/ {print $2; exit}' "$f")"
    [[ -z "${KUBE_LOCAL_CRDS:-}" || "$wanted" == *" $name "* ]] || continue
    names+=("$name")
    files+=("$f")
  done
  ((${#files[@]})) || die "KUBE_LOCAL_CRDS ('${KUBE_LOCAL_CRDS:-}') selects no CRD of $crd_dir"
  for n in ${KUBE_LOCAL_CRDS:-}; do
    [[ " ${names[*]} " == *" $n "* ]] || die "KUBE_LOCAL_CRDS names $n, which no file in $crd_dir defines"
  done
  sum="$(cat "${files[@]}" | sha256sum | cut -d' ' -f1) ${KUBE_LOCAL_CRD_CONVERSION:-webhook}"
  # Unchanged since the last start on this etcd data: nothing to apply.
  if [[ "$(cat "$STATE_DIR/crds.applied" 2>/dev/null)" == "$sum" && -s "$STATE_DIR/crds.endpoints" ]] \
    && wait_for "CRDs unchanged and served" 30 crds_served; then
    return 0
  fi
  rm -f "$STATE_DIR/crds.applied" "$STATE_DIR/crds.endpoints"
  : >"$STATE_DIR/logs/crds.log"
  # One kubectl per file, in parallel: the CRDs are large and a serial apply takes ~10s.
  # Each prints group/storage-version/plural for the crds_served probe.
  for i in "${!files[@]}"; do
    KUBECONFIG="$STATE_DIR/kubeconfig" "$KUBECTL" apply --server-side --force-conflicts \
      --field-manager=kube-local -f "${files[$i]}" \
      -o jsonpath='{.spec.group}/{.spec.versions[?(@.storage==true)].name}/{.spec.names.plural}{"\n"}' \
      >"$STATE_DIR/crds.endpoints.$i" 2>>"$STATE_DIR/logs/crds.log" &
    pids+=($!)
  done
  local failed=0
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || { failed=1; log "applying ${files[$i]} failed"; }; done
  cat "$STATE_DIR"/crds.endpoints.* >"$STATE_DIR/crds.endpoints"
  rm -f "$STATE_DIR"/crds.endpoints.*
  ((failed == 0)) || { cat "$STATE_DIR/logs/crds.log" >&2; die "installing CRDs from $crd_dir failed"; }
  if [[ "${KUBE_LOCAL_CRD_CONVERSION:-webhook}" == none ]]; then
    # The reference CRDs convert v1alpha1<->v1beta1 through the Dynamo operator's webhook,
    # which does not run here; strategy None makes v1alpha1 reads/writes succeed (no real
    # conversion: fields are copied as they are).
    for f in "${names[@]}"; do
      KUBECONFIG="$STATE_DIR/kubeconfig" "$KUBECTL" patch crd "$f" --type=merge \
        -p '{"spec":{"conversion":{"strategy":"None","webhook":null}}}' -o name >>"$STATE_DIR/logs/crds.log" 2>&1 \
        || die "patching the conversion of CRD $f failed"
    done
  fi
  { wait_for "CRDs served" 60 crds_served && wait_for "CRDs Established" 60 crds_established "${names[@]}"; } \
    || { cat "$STATE_DIR/logs/crds.log" >&2; die "CRDs did not become Established"; }
  echo "$sum" >"$STATE_DIR/crds.applied"
  log "installed ${#files[@]} CRDs from $crd_dir"
}

cmd_start() {
  T0US=${EPOCHREALTIME/./}
  if pid_alive etcd && pid_alive kube-apiserver && readyz; then
    if { [[ "${KUBE_LOCAL_NO_KCM:-0}" == 1 ]] || pid_alive kube-controller-manager; } \
      && { ! sim_wanted || { pid_alive kube-scheduler && pid_alive kwok; }; }; then
      if [[ "${KUBE_LOCAL_NODE:-0}" == 1 ]]; then KUBE_LOCAL_DIR="$STATE_DIR" "$SCRIPT_DIR/kube-node.sh" start; fi
      log "already running: KUBECONFIG=$STATE_DIR/kubeconfig"
      return 0
    fi
  fi
  # What the start needs and cannot build is checked before any process starts, so a missing part fails in seconds.
  check_crd_source
  # Anything half-running (e.g. after a crash) is stopped first.
  cmd_stop >/dev/null 2>&1 || true
  # A start that fails halfway stops what it started (etcd, the apiserver...): nothing is left running behind an error.
  trap 'rc=$?; if ((rc != 0)); then cmd_stop >/dev/null 2>&1 || true; fi' EXIT

  [[ -x "$ETCD_BIN" && -x "$APISERVER_BIN" ]] || cmd_build
  [[ "${KUBE_LOCAL_NO_KCM:-0}" == 1 || -x "$KCM_BIN" ]] || cmd_build
  ! sim_wanted || [[ -x "$SCHED_BIN" && -x "$KWOK_BIN" && -s "$KWOK_STAGES" ]] || cmd_build
  command -v "$KUBECTL" >/dev/null || die "kubectl not found (set KUBECTL)"

  mkdir -p "$STATE_DIR/logs" "$STATE_DIR/etcd"
  chmod 700 "$STATE_DIR/etcd"
  gen_certs

  # Ports: reuse the previous ones when still free (etcd keeps its peer URL in its data).
  local prev_api="" prev_client="" prev_peer="" prev_sched=""
  if [[ -f "$STATE_DIR/ports.env" ]]; then
    # shellcheck disable=SC1091
    source "$STATE_DIR/ports.env"
    prev_api="$APISERVER_PORT" prev_client="$ETCD_CLIENT_PORT" prev_peer="$ETCD_PEER_PORT"
    prev_sched="${SCHEDULER_PORT:-}"
  fi
  APISERVER_PORT="${KUBE_LOCAL_PORT:-$(pick_port "$prev_api")}"
  ETCD_CLIENT_PORT="$(pick_port "$prev_client")"
  ETCD_PEER_PORT="$(pick_port "$prev_peer")"
  while [[ "$ETCD_PEER_PORT" == "$ETCD_CLIENT_PORT" || "$ETCD_PEER_PORT" == "$APISERVER_PORT" ]]; do ETCD_PEER_PORT="$(free_port)"; done
  while [[ "$ETCD_CLIENT_PORT" == "$APISERVER_PORT" ]]; do ETCD_CLIENT_PORT="$(free_port)"; done
  SCHEDULER_PORT="$(pick_port "$prev_sched")"
  while [[ " $APISERVER_PORT $ETCD_CLIENT_PORT $ETCD_PEER_PORT " == *" $SCHEDULER_PORT "* ]]; do SCHEDULER_PORT="$(free_port)"; done
  port_free "$APISERVER_PORT" || die "port $APISERVER_PORT is in use"
  printf 'APISERVER_PORT=%s\nETCD_CLIENT_PORT=%s\nETCD_PEER_PORT=%s\nSCHEDULER_PORT=%s\n' \
    "$APISERVER_PORT" "$ETCD_CLIENT_PORT" "$ETCD_PEER_PORT" "$SCHEDULER_PORT" >"$STATE_DIR/ports.env"
  write_kubeconfig "$STATE_DIR/kubeconfig" "$APISERVER_PORT"

  local pki="$STATE_DIR/pki"
  start_proc etcd "$ETCD_BIN" \
    --name=kube-local \
    --data-dir="$STATE_DIR/etcd" \
    --listen-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --advertise-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="kube-local=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync \
    --heartbeat-interval=50 \
    --election-timeout=250 \
    --max-request-bytes=10485760 \
    --quota-backend-bytes=4294967296 \
    --log-level=warn
  wait_for "etcd healthy" 30 etcd_healthy || fail_with_log etcd "etcd did not become healthy"

  # --kubelet-preferred-address-types: `kubectl logs`, `exec` and `port-forward` reach the real node's kubelet at its
  # InternalIP (tools/kube-node.sh's bridge address); its hostname, the default's first choice, resolves nowhere.
  start_proc kube-apiserver "$APISERVER_BIN" \
    --bind-address=127.0.0.1 \
    --advertise-address=127.0.0.1 \
    --secure-port="$APISERVER_PORT" \
    --etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --tls-cert-file="$pki/apiserver.crt" \
    --tls-private-key-file="$pki/apiserver.key" \
    --client-ca-file="$pki/ca.crt" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$pki/sa.pub" \
    --service-account-signing-key-file="$pki/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --authorization-mode=RBAC \
    --allow-privileged=true \
    --endpoint-reconciler-type=none \
    --kubelet-preferred-address-types=InternalIP,Hostname \
    --watch-cache=false \
    --profiling=false \
    --v=1
  wait_for "kube-apiserver ready" "$START_TIMEOUT" readyz \
    || { pid_alive kube-apiserver || fail_with_log kube-apiserver "kube-apiserver exited"
         fail_with_log kube-apiserver "kube-apiserver not ready after ${START_TIMEOUT}s"; }

  install_crds

  # Started after the CRDs so it does not compete with their installation for CPU.
  if [[ "${KUBE_LOCAL_NO_KCM:-0}" != 1 ]]; then
    # No scheduler/kubelet/cloud: the node and cloud controllers have nothing to do. With the real node, the node
    # lifecycle controller runs: it takes the node.kubernetes.io/not-ready taint the kubelet registers with off
    # the node once it is Ready (and taints it again when it stops reporting).
    local KCM_CONTROLLERS='*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller,-persistentvolume-attach-detach-controller,-taint-eviction-controller'
    [[ "${KUBE_LOCAL_NODE:-0}" == 1 ]] || KCM_CONTROLLERS+=',-nodelifecycle'
    start_proc kube-controller-manager "$KCM_BIN" \
      --kubeconfig="$STATE_DIR/kubeconfig" \
      --authentication-kubeconfig="$STATE_DIR/kubeconfig" \
      --authorization-kubeconfig="$STATE_DIR/kubeconfig" \
      --bind-address=127.0.0.1 \
      --secure-port=0 \
      --leader-elect=false \
      --use-service-account-credentials=false \
      --root-ca-file="$pki/ca.crt" \
      --service-account-private-key-file="$pki/sa.key" \
      --cluster-signing-cert-file="$pki/ca.crt" \
      --cluster-signing-key-file="$pki/ca.key" \
      --controllers="$KCM_CONTROLLERS" \
      --concurrent-gc-syncs=5 \
      --v=1
    # Its serviceaccount controller creating default/default shows the controllers run
    # (and Pods in "default" need that ServiceAccount).
    wait_for "kube-controller-manager running" 60 default_sa_exists \
      || { pid_alive kube-controller-manager || fail_with_log kube-controller-manager "kube-controller-manager exited"
           fail_with_log kube-controller-manager "no ServiceAccount default/default after 60s"; }
  fi

  if sim_wanted; then
    # The real scheduler: with no nodes (the default) every pod stays Pending, as before.
    start_proc kube-scheduler "$SCHED_BIN" \
      --kubeconfig="$STATE_DIR/kubeconfig" \
      --authentication-kubeconfig="$STATE_DIR/kubeconfig" \
      --authorization-kubeconfig="$STATE_DIR/kubeconfig" \
      --bind-address=127.0.0.1 \
      --secure-port="$SCHEDULER_PORT" \
      --cert-dir="$STATE_DIR/pki/kube-scheduler" \
      --leader-elect=false \
      --v=1
    wait_for "kube-scheduler ready" 60 scheduler_ready \
      || { pid_alive kube-scheduler || fail_with_log kube-scheduler "kube-scheduler exited"
           fail_with_log kube-scheduler "kube-scheduler not ready after 60s"; }
    # kwok manages only nodes annotated kwok.x-k8s.io/node=fake (none exist until asked for).
    start_proc kwok "$KWOK_BIN" \
      --kubeconfig="$STATE_DIR/kubeconfig" \
      --config="$KWOK_STAGES" \
      --manage-all-nodes=false \
      --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
      --node-lease-duration-seconds=40 \
      --cidr=10.244.0.0/16
    wait_for "kwok running" 10 kwok_running || fail_with_log kwok "kwok exited"
  fi

  if [[ "${KUBE_LOCAL_NODE:-0}" == 1 ]]; then
    KUBE_LOCAL_DIR="$STATE_DIR" "$SCRIPT_DIR/kube-node.sh" start
  fi
  log "ready in $(elapsed): export KUBECONFIG=$STATE_DIR/kubeconfig (logs: $STATE_DIR/logs)"
  trap - EXIT
}

scheduler_ready() {
  curl -fsSk --max-time 2 "https://127.0.0.1:$SCHEDULER_PORT/readyz" >/dev/null 2>&1
}

kwok_running() { # alive a moment after start (it exits at once on a bad flag or config)
  sleep 0.3
  pid_alive kwok
}

cmd_stop() {
  # The real node first (its kubelet and controller talk to the API server), whenever one was started here.
  if [[ -d "$STATE_DIR/node" ]]; then KUBE_LOCAL_DIR="$STATE_DIR" "$SCRIPT_DIR/kube-node.sh" stop; fi
  stop_proc kwok
  stop_proc kube-scheduler
  stop_proc kube-controller-manager
  stop_proc kube-apiserver
  stop_proc etcd
}

cmd_status() {
  local n rc=0
  for n in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do
    if pid_alive "$n"; then echo "$n: running (pid $(cat "$STATE_DIR/$n.pid"))"; else echo "$n: stopped"; fi
  done
  if pid_alive kube-apiserver && readyz; then
    echo "apiserver: ready at https://127.0.0.1:$APISERVER_PORT ($K8S_VERSION, etcd $ETCD_VERSION)"
    echo "KUBECONFIG=$STATE_DIR/kubeconfig"
  else
    echo "apiserver: not ready"
    rc=1
  fi
  return $rc
}

lock_state() { # serialize start/stop/reset on one state dir
  mkdir -p "$STATE_DIR"
  exec 8>"$STATE_DIR/.lock"
  flock 8
}

case "${1:-}" in
  build) cmd_build ;;
  pin) shift; cmd_pin "$@" ;;
  start) lock_state; cmd_start ;;
  stop) lock_state; cmd_stop ;;
  restart) lock_state; cmd_stop; cmd_start ;;
  status) cmd_status ;;
  env) echo "export KUBECONFIG=$STATE_DIR/kubeconfig" ;;
  reset) lock_state; cmd_stop; rm -rf "$STATE_DIR"; log "removed $STATE_DIR" ;;
  *) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2 ;;
esac
