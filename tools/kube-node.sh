#!/usr/bin/env bash
# kube-node.sh: one real node for the local control plane (tools/kube-local.sh), beside its KWOK nodes.
#
# containerd + runc run the pods' containers, the CNI bridge/host-local/loopback plugins give each pod its network
# namespace and address, the kubelet and kube-proxy are built from the Kubernetes release the control plane runs, and
# kube-proxy programs Services with nftables; a real NetworkPolicy agent enforces policies (kube-network-policies, or
# kube-router's firewall where the kernel lacks nftables' queue expression). Everything runs on this host as root
# (Linux only: namespaces, cgroups, mounts); one real node per machine at a time (the bridge, the nftables and
# iptables tables, the ipsets and /run/netns are the host's).
#
# Usage: tools/kube-node.sh build|start|stop|status
#   build   fetch and unpack the pinned Debian packages (tools/kube/node/debs.lock), build kubelet and kube-proxy
#           (tools/kube/node/go.mod), the NetworkPolicy agent (tools/kube/netpol, tools/kube/router), the local
#           images (tools/node/images.py); all cached in the toolchain cache
#   start   start containerd, import the images, start the kubelet (node "local-node") and kube-proxy against the
#           running control plane ($KUBE_LOCAL_DIR/kubeconfig), and the stand-in device plugin; wait until the node
#           is Ready and advertises the GPU and fabric resources of tools/node/resources.env; start
#           tools/node/controller.py (the stand-ins for the Dynamo operator and a volume provisioner). A failed start
#           stops what it started.
#   stop    stop kube-proxy, the kubelet, every container and containerd; unmount what they mounted, delete the pods'
#           network namespaces, the bridge, the nftables tables, the legacy iptables chains and ipsets: nothing is left behind
#   status  print what runs
#
# Environment: DYNAMO_TOOLCHAIN_CACHE, KUBE_LOCAL_DIR (as tools/kube-local.sh); KUBE_NODE_TIMEOUT (seconds, default 120).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
MOD_DIR="$SCRIPT_DIR/kube/node"
CACHE_DIR="${DYNAMO_TOOLCHAIN_CACHE:-$HOME/.cache/dynamo-pulumi-toolchain}"
STATE_DIR="${KUBE_LOCAL_DIR:-$REPO_ROOT/.tools/kube}"
NODE_DIR="$STATE_DIR/node"
TIMEOUT="${KUBE_NODE_TIMEOUT:-120}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

# One node per machine: the owner file names the state dir of the node that runs.
OWNER=/run/dynamo-local-node.owner
MADE_VAR_LIB_KUBELET=/run/dynamo-local-node.made-var-lib-kubelet
NODE_NAME=local-node
BRIDGE=dynlocal0
POD_SUBNET=10.88.0.0/16
POD_GATEWAY=10.88.0.1

log() { printf '[kube-node] %s\n' "$*" >&2; }
die() { printf '[kube-node] ERROR: %s\n' "$*" >&2; exit 1; }

K8S_VERSION="$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$MOD_DIR/go.mod")"
[[ -n "$K8S_VERSION" ]] || die "no k8s.io/kubernetes version in $MOD_DIR/go.mod"
DEBS_HASH="$(sha256sum "$MOD_DIR/debs.lock" | cut -c1-12)"
DEBS_DIR="$CACHE_DIR/node-debs-$DEBS_HASH"
ROOTFS="$DEBS_DIR/root"
KUBELET_BIN="$CACHE_DIR/kubelet-$K8S_VERSION/kubelet"
PROXY_BIN="$CACHE_DIR/kube-proxy-$K8S_VERSION/kube-proxy"
NETPOL_VERSION="$(awk '$1 == "sigs.k8s.io/kube-network-policies" { print $2; exit }' "$SCRIPT_DIR/kube/netpol/go.mod")"
NETPOL_BIN="$CACHE_DIR/kube-network-policies-$NETPOL_VERSION/kube-network-policies"
ROUTER_VERSION="$(awk '$1 == "github.com/cloudnativelabs/kube-router/v2" { print $2; exit }' "$SCRIPT_DIR/kube/router/go.mod")"
ROUTER_BIN="$CACHE_DIR/kube-router-$ROUTER_VERSION/kube-router"
# The control plane's Service range (tools/kube-local.sh, kube-apiserver --service-cluster-ip-range).
SERVICE_CIDR=10.0.0.0/24
# The stand-in device plugin (tools/kube/node/deviceplugin), built in the node's module: cached by its source and go.sum.
DP_HASH="$(cat "$MOD_DIR/deviceplugin/main.go" "$MOD_DIR/go.sum" | sha256sum | cut -c1-12)"
DP_BIN="$CACHE_DIR/local-device-plugin-$DP_HASH/deviceplugin"
# The kubelet serves its device plugin registry at this fixed path, whatever its --root-dir.
DP_DIR=/var/lib/kubelet/device-plugins
BIN_DIR="$NODE_DIR/bin" # containerd, its shims, runc, nft and ctr, on PATH for the processes started here
KUBECTL_BIN="$CACHE_DIR/kubectl-$K8S_VERSION/kubectl"
SOCK="$NODE_DIR/containerd/containerd.sock"
# containerd's root (its image content and unpacked snapshots) is kept in the toolchain cache, so that the 1.5 GB
# runtime image is imported and unpacked once per machine, not at every start (one node per machine: see OWNER).
# Containers never outlive a node there: start and stop remove every container and its snapshot.
CTRD_ROOT="$CACHE_DIR/node-containerd"

# ---------------------------------------------------------------- build
fetch_debs() {
  [[ -f "$DEBS_DIR/.complete" ]] && return 0
  command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || die "apt-get and dpkg-deb are needed (Debian or Ubuntu host)"
  local tmp="$DEBS_DIR.tmp.$$" pkg ver sum f
  rm -rf "$tmp"
  mkdir -p "$tmp/debs" "$tmp/root"
  while read -r pkg ver sum; do
    [[ -z "$pkg" || "$pkg" == \#* ]] && continue
    (cd "$tmp/debs" && apt-get download -q "$pkg=$ver" >/dev/null 2>"$tmp/apt.log") \
      || { cat "$tmp/apt.log" >&2; die "apt-get download $pkg=$ver failed (apt-get update may be needed)"; }
    f="$(ls "$tmp/debs/${pkg}_"*.deb)"
    [[ "$(sha256sum "$f" | cut -d' ' -f1)" == "$sum" ]] || die "$f: SHA-256 differs from tools/kube/node/debs.lock"
    dpkg-deb -x "$f" "$tmp/root"
  done <"$MOD_DIR/debs.lock"
  rm -rf "$tmp/debs"
  touch "$tmp/.complete"
  rm -rf "$DEBS_DIR"
  mv "$tmp" "$DEBS_DIR"
  log "unpacked the packages of tools/kube/node/debs.lock into $DEBS_DIR"
}

go_build() { # <package> <output>
  local out="$2" tmp="$2.tmp.$$" ldflags="" p major minor
  major="${K8S_VERSION#v}"; major="${major%%.*}"
  minor="${K8S_VERSION#v*.}"; minor="${minor%%.*}"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor"
    ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  mkdir -p "$(dirname "$out")"
  log "building $1 (several minutes on 2 cores the first time)"
  (cd "$MOD_DIR" && go build -mod=readonly -trimpath -ldflags="-s -w $ldflags" -o "$tmp" "$1") || { rm -f "$tmp"; die "go build $1 failed"; }
  mv -f "$tmp" "$out"
}

cmd_build() {
  command -v go >/dev/null || die "go is not installed"
  mkdir -p "$CACHE_DIR"
  exec 9>"$CACHE_DIR/.kube-node-build.lock"
  flock 9
  fetch_debs
  [[ -x "$KUBELET_BIN" ]] || go_build k8s.io/kubernetes/cmd/kubelet "$KUBELET_BIN"
  [[ -x "$PROXY_BIN" ]] || go_build k8s.io/kubernetes/cmd/kube-proxy "$PROXY_BIN"
  if [[ ! -x "$NETPOL_BIN" ]]; then
    log "building kube-network-policies $NETPOL_VERSION"
    mkdir -p "$(dirname "$NETPOL_BIN")"
    (cd "$SCRIPT_DIR/kube/netpol" && go build -mod=readonly -trimpath -ldflags="-s -w" -o "$NETPOL_BIN.tmp" sigs.k8s.io/kube-network-policies/cmd) \
      || die "go build kube-network-policies failed"
    mv -f "$NETPOL_BIN.tmp" "$NETPOL_BIN"
  fi
  # kube-router's firewall enforces NetworkPolicies where kube-network-policies cannot (start_netpol): built only
  # where the kernel lacks the nftables queue expression (or where this build cannot tell: not root).
  if [[ ! -x "$ROUTER_BIN" ]] && ! nft_queue_works; then
    log "building kube-router $ROUTER_VERSION (its firewall: this kernel has no nftables queue expression)"
    mkdir -p "$(dirname "$ROUTER_BIN")"
    (cd "$SCRIPT_DIR/kube/router" && go build -mod=readonly -trimpath -ldflags="-s -w" -o "$ROUTER_BIN.tmp" github.com/cloudnativelabs/kube-router/v2/cmd/kube-router) \
      || { rm -f "$ROUTER_BIN.tmp"; die "go build kube-router failed"; }
    mv -f "$ROUTER_BIN.tmp" "$ROUTER_BIN"
  fi
  [[ -x "$DP_BIN" ]] || go_build ./deviceplugin "$DP_BIN"
  flock -u 9
  "${PY:-$REPO_ROOT/.venv/bin/python}" "$REPO_ROOT/tools/node/images.py" build --busybox "$ROOTFS/bin/busybox" >/dev/null
  log "kubelet, kube-proxy $K8S_VERSION; containerd, runc, CNI plugins, nft from $DEBS_DIR"
}

# ---------------------------------------------------------------- processes
pid_alive() { [[ -f "$NODE_DIR/$1.pid" ]] && kill -0 "$(cat "$NODE_DIR/$1.pid")" 2>/dev/null; }

start_proc() { # <name> <binary> [args...]: started in its own session, output in logs/<name>.log
  local name="$1"
  shift
  setsid "$@" >>"$NODE_DIR/logs/$name.log" 2>&1 </dev/null 8>&- 9>&- &
  echo $! >"$NODE_DIR/$name.pid"
}

stop_proc() { # <name>: TERM, then KILL after 10 s
  local name="$1" pid i
  [[ -f "$NODE_DIR/$name.pid" ]] || return 0
  pid="$(cat "$NODE_DIR/$name.pid")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$NODE_DIR/$name.pid"
}

wait_for() { # <what> <seconds> <command...>
  local what="$1" t="$2" deadline
  shift 2
  deadline=$((SECONDS + t))
  until "$@"; do
    ((SECONDS < deadline)) || { log "timed out after ${t}s waiting for $what"; return 1; }
    sleep 0.5
  done
}

kctl() { "$KUBECTL_BIN" --kubeconfig "$STATE_DIR/kubeconfig" "$@"; }
ctr_() { "$BIN_DIR/ctr" --address "$SOCK" -n k8s.io "$@"; }

fail_with_log() { # <name> <message>
  log "$2; last lines of $NODE_DIR/logs/$1.log:"
  tail -n 25 "$NODE_DIR/logs/$1.log" >&2 || true
  exit 1
}

link_bins() {
  mkdir -p "$BIN_DIR"
  local b
  for b in containerd containerd-shim-runc-v2 ctr; do ln -sfn "$ROOTFS/usr/bin/$b" "$BIN_DIR/$b"; done
  ln -sfn "$ROOTFS/usr/sbin/runc" "$BIN_DIR/runc"
  # nft from the unpacked packages, with their libraries (libnftables, libnftnl)
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$ROOTFS/usr/lib/x86_64-linux-gnu" "$ROOTFS/usr/sbin/nft" >"$BIN_DIR/nft"
  chmod +x "$BIN_DIR/nft"
  # kube-router's iptables and ipset: the legacy (x_tables) commands, which need no nftables queue expression, with
  # their extensions and libraries from the unpacked packages. kube-router finds them on PATH under these names.
  local lib="$ROOTFS/usr/lib/x86_64-linux-gnu"
  for b in iptables iptables-save iptables-restore; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s XTABLES_LIBDIR=%s exec %s %s "$@"\n' "$lib" "$lib/xtables" "$ROOTFS/usr/sbin/xtables-legacy-multi" "$b" >"$BIN_DIR/$b"
    chmod +x "$BIN_DIR/$b"
  done
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$lib" "$ROOTFS/usr/sbin/ipset" >"$BIN_DIR/ipset"
  chmod +x "$BIN_DIR/ipset"
}

write_configs() {
  local pause="$1" kubelet_port="$2"
  mkdir -p "$NODE_DIR/cni/net.d" "$NODE_DIR/cni/state" "$NODE_DIR/containerd" "$NODE_DIR/kubelet" "$NODE_DIR/logs" "$CTRD_ROOT"
  # bridge + host-local + loopback: each pod gets a veth on the bridge and an address of the pod subnet; the bridge
  # is the pods' gateway. No ipMasq and no portmap: both program iptables, which this host does not have, and no pod
  # of the program uses a hostPort.
  cat >"$NODE_DIR/cni/net.d/10-local.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "dynamo-local", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_SUBNET", "gateway": "$POD_GATEWAY"}]],
            "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$NODE_DIR/cni/state"}},
  {"type": "loopback"}]}
EOF
  # restrict_oom_score_adj: this sandbox lacks CAP_SYS_RESOURCE (without it runc fails with "can't get final
  # child's PID from pipe"); the sandbox image is the local pause image, never pulled.
  cat >"$NODE_DIR/containerd/config.toml" <<EOF
version = 2
root = "$CTRD_ROOT/root"
state = "$NODE_DIR/containerd/state"
[grpc]
  address = "$SOCK"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause"
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$BIN_DIR/runc"
        SystemdCgroup = false
    # The handler of RuntimeClass "nvidia" (tools/node/runtime-class.yaml), which GPU pods name. On a GPU node the
    # NVIDIA Container Toolkit registers it (nvidia-container-runtime, which wraps runc and injects the devices);
    # here it is runc itself: there are no devices to inject.
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
        BinaryName = "$BIN_DIR/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$ROOTFS/usr/lib/cni"
    conf_dir = "$NODE_DIR/cni/net.d"
EOF
  # cgroupfs (cgroup v1 here, no systemd); no swap check, no node-allocatable enforcement, no image GC or
  # eviction on this host's disk (the images are imported once and must stay).
  cat >"$NODE_DIR/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$SOCK
cgroupDriver: cgroupfs
failSwapOn: false
enforceNodeAllocatable: []
address: $POD_GATEWAY
port: $kubelet_port
readOnlyPort: 0
healthzPort: 0
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "0%", imagefs.available: "0%"}
serializeImagePulls: false
resolvConf: /etc/resolv.conf
clusterDomain: cluster.local
registerNode: true
nodeStatusUpdateFrequency: 10s
syncFrequency: 20s
fileCheckFrequency: 5s
podLogsDir: $NODE_DIR/pod-logs
EOF
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

node_ready() {
  [[ "$(kctl get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

resources_advertised() {
  local k v got
  while IFS='=' read -r k v; do
    [[ -z "$k" || "$k" == \#* ]] && continue
    got="$(kctl get node "$NODE_NAME" -o jsonpath="{.status.allocatable.${k//./\\.}}" 2>/dev/null)"
    [[ "$got" == "$v" ]] || return 1
  done <"$REPO_ROOT/tools/node/resources.env"
}

cmd_start() {
  [[ "$(uname -s)" == Linux && "$(id -u)" == 0 ]] || die "the local node needs Linux and root (namespaces, cgroups, mounts)"
  [[ -s "$STATE_DIR/kubeconfig" ]] || die "no control plane at $STATE_DIR (tools/kube-local.sh start first)"
  if [[ -f "$OWNER" ]]; then
    local other
    other="$(cat "$OWNER")"
    if [[ "$other" != "$NODE_DIR" ]] && [[ -f "$other/kubelet.pid" ]] && kill -0 "$(cat "$other/kubelet.pid")" 2>/dev/null; then
      die "another local node runs on this machine ($other): stop it first (KUBE_LOCAL_DIR=${other%/node} tools/kube-local.sh stop)"
    fi
  fi
  if pid_alive kubelet && pid_alive containerd && pid_alive kube-proxy && node_ready; then
    log "already running: node $NODE_NAME"
    return 0
  fi
  cmd_stop >/dev/null 2>&1 || true
  trap 'rc=$?; if ((rc != 0)); then cmd_stop >/dev/null 2>&1 || true; fi' EXIT
  [[ -f "$DEBS_DIR/.complete" && -x "$KUBELET_BIN" && -x "$PROXY_BIN" && -x "$NETPOL_BIN" && -x "$DP_BIN" ]] || cmd_build
  echo "$NODE_DIR" >"$OWNER"
  mkdir -p "$NODE_DIR/logs"
  link_bins
  local images pause
  images="$("${PY:-$REPO_ROOT/.venv/bin/python}" "$REPO_ROOT/tools/node/images.py" build --busybox "$ROOTFS/bin/busybox")" || die "building the local images failed"
  pause="$(awk '$1 == "pause" { print $2 }' <<<"$images")"
  [[ -n "$pause" ]] || die "tools/node/images.py built no pause image"
  local kubelet_port
  kubelet_port="$(free_port)"
  write_configs "$pause" "$kubelet_port"
  echo 1 >/proc/sys/net/ipv4/ip_forward
  # The bridge exists before the kubelet: its address is the node's IP (the kubelet refuses a loopback node IP) and
  # the pods' gateway; the CNI bridge plugin takes the existing bridge and its address as they are.
  ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
  ip addr replace "$POD_GATEWAY/${POD_SUBNET#*/}" dev "$BRIDGE"
  ip link set "$BRIDGE" up

  PATH="$BIN_DIR:$PATH" start_proc containerd "$BIN_DIR/containerd" --config "$NODE_DIR/containerd/config.toml"
  wait_for "containerd" 30 ctr_ version >/dev/null || fail_with_log containerd "containerd did not start"
  remove_containers # an earlier node's, had it been killed before its stop
  # Each archive once per containerd store (its name records the hash of its inputs), then its other names.
  local name ref tar aliases alias
  while read -r name ref tar aliases; do
    [[ -n "$tar" ]] || continue
    if [[ "$(cat "$CTRD_ROOT/$name.imported" 2>/dev/null)" != "$tar" ]] || ! ctr_ images ls -q | grep -qxF "$ref"; then
      log "importing image $ref ($(du -h "$tar" | cut -f1))"
      ctr_ images import "$tar" >>"$NODE_DIR/logs/images.log" 2>&1 || fail_with_log images "importing $tar failed"
      echo "$tar" >"$CTRD_ROOT/$name.imported"
    fi
    for alias in $aliases; do
      ctr_ images tag --force "$ref" "$alias" >>"$NODE_DIR/logs/images.log" 2>&1 || fail_with_log images "tagging $ref as $alias failed"
    done
  done <<<"$images"

  # The kubelet makes /var/lib/kubelet (its device plugin registry); one made for this node goes at stop.
  [[ -d /var/lib/kubelet && ! -f "$MADE_VAR_LIB_KUBELET" ]] || echo "$NODE_DIR" >"$MADE_VAR_LIB_KUBELET"
  PATH="$BIN_DIR:$PATH" start_proc kubelet "$KUBELET_BIN" \
    --config="$NODE_DIR/kubelet/config.yaml" \
    --kubeconfig="$STATE_DIR/kubeconfig" \
    --root-dir="$NODE_DIR/kubelet/root" \
    --cert-dir="$NODE_DIR/kubelet/pki" \
    --hostname-override="$NODE_NAME" \
    --node-ip="$POD_GATEWAY" \
    --node-labels="dynamo.local/real-node=true" \
    --v=1
  wait_for "node $NODE_NAME Ready" "$TIMEOUT" node_ready || { pid_alive kubelet || fail_with_log kubelet "the kubelet exited"; fail_with_log kubelet "node $NODE_NAME not Ready"; }
  # The GPU and fabric resources, through the kubelet's device plugin API (tools/kube/node/deviceplugin/main.go says
  # what each container gets). /var/lib/kubelet is the host's: removed at stop when this start made it.
  mkdir -p "$DP_DIR"
  start_proc device-plugin "$DP_BIN" --dir "$DP_DIR" --resources "$REPO_ROOT/tools/node/resources.env" \
    --nvidia-smi "$REPO_ROOT/tools/node/nvidia-smi"
  kctl apply -f "$REPO_ROOT/tools/node/runtime-class.yaml" >/dev/null
  wait_for "extended resources on $NODE_NAME" 30 resources_advertised || fail_with_log kubelet "the node does not advertise tools/node/resources.env"

  # nftables mode (GA in Kubernetes 1.33); --masquerade-all: a pod reaching a Service backed by a pod on the same
  # bridge gets the answer through the host, where conntrack undoes the DNAT.
  PATH="$BIN_DIR:$PATH" start_proc kube-proxy "$PROXY_BIN" \
    --kubeconfig="$STATE_DIR/kubeconfig" \
    --hostname-override="$NODE_NAME" \
    --proxy-mode=nftables \
    --masquerade-all \
    --cluster-cidr="$POD_SUBNET" \
    --conntrack-max-per-core=0 \
    --healthz-bind-address="127.0.0.1:$(free_port)" \
    --metrics-bind-address="127.0.0.1:$(free_port)" \
    --v=1
  wait_for "kube-proxy's nftables table" 30 bash -c "'$BIN_DIR/nft' list table ip kube-proxy >/dev/null 2>&1" \
    || fail_with_log kube-proxy "kube-proxy programmed no nftables table"
  # NetworkPolicy enforcement by a real agent (start_netpol says which).
  start_netpol
  # Dynamo's discovery store for the pods (tools/node/controller.py): an etcd of the control plane's pinned release on
  # the bridge address, as the dynamo-platform chart runs one for the operator's pods.
  local etcd_version peer
  peer="$(free_port)"
  etcd_version="$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2; exit }' "$SCRIPT_DIR/kube/etcd/go.mod")"
  mkdir -p "$NODE_DIR/dynamo-etcd"
  start_proc dynamo-etcd "$CACHE_DIR/etcd-$etcd_version/etcd" --name=dynamo-discovery --data-dir="$NODE_DIR/dynamo-etcd" \
    --listen-client-urls="http://$POD_GATEWAY:2379" --advertise-client-urls="http://$POD_GATEWAY:2379" \
    --listen-peer-urls="http://127.0.0.1:$peer" --initial-advertise-peer-urls="http://127.0.0.1:$peer" \
    --initial-cluster="dynamo-discovery=http://127.0.0.1:$peer" --initial-cluster-state=new --unsafe-no-fsync --log-level=warn
  wait_for "Dynamo's etcd" 30 curl -fs -o /dev/null "http://$POD_GATEWAY:2379/health" || fail_with_log dynamo-etcd "etcd did not start"
  # The model hub the runtime image's HF_ENDPOINT names (tools/node/hub.py), on the bridge address the pods reach.
  start_proc model-hub "${PY:-$REPO_ROOT/.venv/bin/python}" "$REPO_ROOT/tools/node/hub.py" --host "$POD_GATEWAY" --port 18080
  wait_for "the model hub" 60 curl -fs -o /dev/null "http://$POD_GATEWAY:18080/api/models/a/b/revision/main" \
    || fail_with_log model-hub "the model hub did not start"
  # The stand-ins for the Dynamo operator and a volume provisioner (tools/node/controller.py says what they do).
  mkdir -p "$NODE_DIR/volumes"
  start_proc node-controller "${PY:-$REPO_ROOT/.venv/bin/python}" "$REPO_ROOT/tools/node/controller.py" \
    --kubeconfig "$STATE_DIR/kubeconfig" --volumes "$NODE_DIR/volumes"
  wait_for "StorageClass local-node" 30 bash -c "'$KUBECTL_BIN' --kubeconfig '$STATE_DIR/kubeconfig' get storageclass local-node -o name >/dev/null 2>&1" \
    || fail_with_log node-controller "the node controller did not start"
  trap - EXIT
  log "node $NODE_NAME Ready (logs: $NODE_DIR/logs)"
}

nft_queue_works() {
  # kube-network-policies sends each new connection of a pod to user space with nftables' queue expression
  # (nft_queue). A kernel without it refuses every rule set that controller writes; a throwaway network namespace
  # shows that in a second.
  mkdir -p "$NODE_DIR/logs"
  [[ -x "$BIN_DIR/nft" ]] || link_bins
  unshare --net sh -c "'$BIN_DIR/nft' add table inet probe && '$BIN_DIR/nft' add chain inet probe c '{ type filter hook forward priority 0; }' && '$BIN_DIR/nft' add rule inet probe c queue num 1 bypass" \
    >"$NODE_DIR/logs/nft-queue-probe.log" 2>&1
}

service_account_dir() { # <service account> <dir>: its token, the CA and the namespace, as a pod's token volume holds
  local dir="$2"
  mkdir -p "$dir"
  kctl -n kube-system create token "$1" --duration=48h >"$dir/token"
  kctl config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d >"$dir/ca.crt"
  echo kube-system >"$dir/namespace"
}

start_netpol() {
  # NetworkPolicy enforcement by a real agent: kube-network-policies (nftables, NFQUEUE) where the kernel has
  # nftables' queue expression, kube-router's firewall (iptables and ipsets) where it does not. netpol-agent names
  # the agent that runs; a node that runs neither says why in netpol-disabled, and the tests that need enforcement
  # fail with that reason.
  rm -f "$NODE_DIR/netpol-disabled" "$NODE_DIR/netpol-agent"
  if nft_queue_works; then
    start_kube_network_policies
  elif [[ -x "$ROUTER_BIN" ]]; then
    log "this kernel has no nftables queue expression ($(head -n 1 "$NODE_DIR/logs/nft-queue-probe.log")): kube-router's firewall enforces NetworkPolicies"
    start_kube_router
  else
    log "WARNING: NetworkPolicies are NOT enforced on this node: no nftables queue expression and no kube-router build ($ROUTER_BIN; run: tools/kube-node.sh build)"
    echo "no nftables queue expression (nft_queue) and no kube-router build at $ROUTER_BIN" >"$NODE_DIR/netpol-disabled"
  fi
}

start_kube_router() {
  local sa="$NODE_DIR/kube-router-sa" port
  kctl apply -f "$REPO_ROOT/tools/node/kube-router-rbac.yaml" >/dev/null
  service_account_dir kube-router "$sa"
  port="$(awk -F= '$1 == "APISERVER_PORT" { print $2 }' "$STATE_DIR/ports.env")"
  # Its own kubeconfig: the ServiceAccount's token, not the control plane's admin credentials.
  cat >"$sa/kubeconfig" <<KCFG
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "https://127.0.0.1:$port", certificate-authority: "$sa/ca.crt"}}]
users: [{name: kube-router, user: {tokenFile: "$sa/token"}}]
contexts: [{name: local, context: {cluster: local, user: kube-router}}]
current-context: local
KCFG
  # --run-firewall alone: no routes, no BGP, no service proxy (kube-proxy programs Services); no metrics.
  PATH="$BIN_DIR:$PATH" start_proc kube-router "$ROUTER_BIN" --run-firewall=true --run-router=false --run-service-proxy=false \
    --enable-cni=false --kubeconfig="$sa/kubeconfig" --hostname-override="$NODE_NAME" \
    --service-cluster-ip-range="$SERVICE_CIDR" --health-port="$(free_port)" --metrics-port=0 --v=1
  if ! wait_for "kube-router's firewall chains" 30 bash -c "'$BIN_DIR/iptables' -t filter -S KUBE-ROUTER-FORWARD >/dev/null 2>&1"; then
    log "WARNING: NetworkPolicies are NOT enforced on this node: kube-router programmed no firewall chain; last lines:"
    tail -n 5 "$NODE_DIR/logs/kube-router.log" >&2
    stop_proc kube-router
    clean_legacy_iptables
    echo "kube-router programmed no firewall chain: $(tail -n 1 "$NODE_DIR/logs/kube-router.log")" >"$NODE_DIR/netpol-disabled"
    return 0
  fi
  echo kube-router >"$NODE_DIR/netpol-agent"
}

clean_legacy_iptables() {
  # The node's chains in the legacy (x_tables) tables, which nothing else on this host uses: kube-router's
  # (KUBE-ROUTER-*, KUBE-POD-FW-*, KUBE-NWPLCY-*, ...) and the kubelet's (KUBE-FIREWALL, KUBE-KUBELET-CANARY,
  # KUBE-IPTABLES-HINT), with every rule that jumps to them; each table is written back whole (iptables-restore
  # replaces it), then kube-router's ipsets, no longer referenced, are destroyed.
  [[ -x "$BIN_DIR/iptables-save" ]] || return 0
  local t set rules
  for t in filter nat mangle; do
    # the table read whole first: `grep -q` on the pipe would end iptables-save early (SIGPIPE, a failed pipeline)
    rules="$("$BIN_DIR/iptables-save" -t "$t" 2>/dev/null)" || continue
    [[ "$rules" == *$'\n:KUBE-'* ]] || continue
    grep -v -E '^:KUBE-|^-A KUBE-|-j KUBE-' <<<"$rules" | "$BIN_DIR/iptables-restore" -w 5 \
      || log "WARNING: could not remove the KUBE-* chains of the legacy $t table"
  done
  for set in $("$BIN_DIR/ipset" list -n 2>/dev/null | grep -E '^(KUBE-|kube-router)' || true); do
    "$BIN_DIR/ipset" destroy "$set" 2>/dev/null || true
  done
}

start_kube_network_policies() {
  # It reads the API the way it does in a pod (in-cluster config: a ServiceAccount token and the CA at the standard
  # path), here in a mount namespace of its own, so that path is private to it; its ServiceAccount has the
  # ClusterRole of its install.yaml.
  local sa="$NODE_DIR/netpol-sa" port
  kctl apply -f "$REPO_ROOT/tools/node/network-policies-rbac.yaml" >/dev/null
  service_account_dir kube-network-policies "$sa"
  port="$(awk -F= '$1 == "APISERVER_PORT" { print $2 }' "$STATE_DIR/ports.env")"
  mkdir -p /run/secrets
  KUBERNETES_SERVICE_HOST=127.0.0.1 KUBERNETES_SERVICE_PORT="$port" start_proc kube-network-policies \
    unshare --mount --propagation private sh -c \
    "mount -t tmpfs tmpfs /run/secrets && mkdir -p /run/secrets/kubernetes.io && ln -s '$sa' /run/secrets/kubernetes.io/serviceaccount && exec '$NETPOL_BIN' --hostname-override='$NODE_NAME' --disable-nri --netfilter-bug-1766-fix=false --metrics-bind-address=127.0.0.1:$(free_port) --v=2"
  # Any other failure to program its table: the node runs without enforcement, and says so.
  if ! wait_for "kube-network-policies' nftables table" 20 bash -c "'$BIN_DIR/nft' list table inet kube-network-policies >/dev/null 2>&1"; then
    log "WARNING: NetworkPolicies are NOT enforced on this node: kube-network-policies programmed no nftables table; last lines:"
    grep -m1 -A1 'syncing nftables rules' "$NODE_DIR/logs/kube-network-policies.log" >&2 || tail -n 5 "$NODE_DIR/logs/kube-network-policies.log" >&2
    stop_proc kube-network-policies
    echo "kube-network-policies programmed no nftables table" >"$NODE_DIR/netpol-disabled"
  else
    echo kube-network-policies >"$NODE_DIR/netpol-agent"
  fi
}

remove_containers() { # every container and sandbox of the kept root, with its task and snapshot
  local c
  for c in $(ctr_ containers ls -q 2>/dev/null); do
    ctr_ tasks rm -f "$c" >/dev/null 2>&1 || true
    ctr_ containers rm "$c" >/dev/null 2>&1 || true
  done
}

cmd_stop() {
  stop_proc node-controller
  stop_proc model-hub
  stop_proc dynamo-etcd
  rm -rf "$NODE_DIR/dynamo-etcd"
  stop_proc kube-network-policies
  stop_proc kube-router
  clean_legacy_iptables
  stop_proc kube-proxy
  stop_proc kubelet
  stop_proc device-plugin
  rm -f "$DP_DIR"/*.sock
  if [[ -f "$MADE_VAR_LIB_KUBELET" ]]; then
    rm -rf /var/lib/kubelet
    rm -f "$MADE_VAR_LIB_KUBELET"
  fi
  # Every container and sandbox task, then containerd; the shims outlive containerd otherwise.
  if pid_alive containerd; then
    local t
    for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
    sleep 0.5
    remove_containers
  fi
  stop_proc containerd
  local pid
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $SOCK" 2>/dev/null || true); do kill -9 "$pid" 2>/dev/null || true; done
  # runc's leftovers: containers still in runc's state (a crash between kill and delete)
  # Mounts under the node's directories (the kubelet's volumes and subPaths, containerd's snapshots and shm), deepest first.
  local m d
  for d in "$NODE_DIR" "$CTRD_ROOT"; do
    [[ -d "$d" ]] || continue
    for m in $(awk -v d="$d/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r); do
      umount -l "$m" 2>/dev/null || true
    done
  done
  # The pods' network namespaces (CNI names them cni-<uuid>), the bridge and kube-proxy's tables.
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^cni-/ { print $1 }'); do ip netns delete "$ns" 2>/dev/null || true; done
  ip link delete "$BRIDGE" 2>/dev/null || true
  if [[ -x "$BIN_DIR/nft" ]]; then
    "$BIN_DIR/nft" delete table ip kube-proxy 2>/dev/null || true
    "$BIN_DIR/nft" delete table ip6 kube-proxy 2>/dev/null || true
    "$BIN_DIR/nft" delete table inet kube-network-policies 2>/dev/null || true
  fi
  rm -rf "$NODE_DIR/cni/state"
  [[ "$(cat "$OWNER" 2>/dev/null)" == "$NODE_DIR" ]] && rm -f "$OWNER"
  if [[ -s "$STATE_DIR/kubeconfig" ]] && [[ -x "$KUBECTL_BIN" ]]; then
    kctl delete node "$NODE_NAME" --wait=false --request-timeout=5s >/dev/null 2>&1 || true
  fi
  return 0
}

cmd_status() {
  local n
  for n in containerd kubelet device-plugin kube-proxy kube-network-policies kube-router dynamo-etcd model-hub node-controller; do
    if pid_alive "$n"; then echo "$n: running (pid $(cat "$NODE_DIR/$n.pid"))"; else echo "$n: stopped"; fi
  done
}

case "${1:-}" in
  build) cmd_build ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2 ;;
esac
