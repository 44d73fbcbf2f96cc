#!/usr/bin/env bash
# Smoke test of the local control plane started by tools/kube-local.sh start:
# creates and reads back core objects and a DynamoGraphDeployment, checks schema
# validation, and checks that deletions (Job, PVC, namespace) complete.
# Usage: tools/kube/smoke-test.sh   (KUBECONFIG defaults to the kube-local one)
set -uo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
export KUBECONFIG="${KUBECONFIG:-${KUBE_LOCAL_DIR:-$REPO_ROOT/.tools/kube}/kubeconfig}"
REFERENCE_DIR="${DYNAMO_REFERENCE:-$REPO_ROOT/../shared/reference}"
DGD="$REFERENCE_DIR/dynamo-recipes/nemotron-3.5-lightning/vllm/agg-h100-dspark/deploy.yaml"
K="${KUBECTL:-kubectl}"
NS="kube-local-smoke-$$"
passed=0 failed=0

check() { # <description> <command...>
  local desc="$1" out; shift
  if out="$("$@" 2>&1)"; then
    passed=$((passed + 1)); echo "ok   $desc"
  else
    failed=$((failed + 1)); echo "FAIL $desc"; printf '     %s\n' "${out//$'\n'/$'\n     '}"
  fi
}

timed() { # <max seconds> <command...>: run with a deadline
  local max="$1"; shift
  timeout "$max" "$@"
}

rejects() { # <expected stderr fragment> <command...>: the command must fail with that message
  local want="$1" out; shift
  if out="$("$@" 2>&1)"; then echo "unexpectedly accepted: $out"; return 1; fi
  grep -qF -- "$want" <<<"$out" || { echo "rejected, but not with '$want': $out"; return 1; }
}

check "create namespace" "$K" create namespace "$NS"
check "create PVC, Secret, ConfigMap, Job" "$K" -n "$NS" apply -f - <<EOF
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: model-cache}
spec: {accessModes: [ReadWriteMany], resources: {requests: {storage: 10Gi}}}
---
apiVersion: v1
kind: Secret
metadata: {name: hf-token-secret}
stringData: {HF_TOKEN: dummy}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg}
data: {key: value}
---
apiVersion: batch/v1
kind: Job
metadata: {name: download}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox, command: ["true"]}]
EOF
check "read back Secret" bash -c "[[ \$($K -n $NS get secret hf-token-secret -o jsonpath='{.data.HF_TOKEN}' | base64 -d) == dummy ]]"
check "read back ConfigMap" bash -c "[[ \$($K -n $NS get configmap cfg -o jsonpath='{.data.key}') == value ]]"
check "read back PVC" "$K" -n "$NS" get pvc model-cache
check "Job controller created its Pod" timed 30 bash -c "until [[ -n \$($K -n $NS get pods -l job-name=download -o name) ]]; do sleep 0.5; done"
check "create DGD (server-side apply)" "$K" -n "$NS" apply --server-side -f "$DGD"
check "read back DGD" bash -c "[[ \$($K -n $NS get dynamographdeployment vllm-agg-h100-dspark -o jsonpath='{.spec.backendFramework}') == vllm ]]"
check "DGD with a string replicas is rejected" rejects "must be of type integer" \
  bash -c "sed -e '0,/replicas: 1/s//replicas: \"one\"/' -e 's/name: vllm-agg-h100-dspark\$/name: bad/' '$DGD' | $K -n $NS create -f -"
check "DGD with an unknown field is rejected" rejects 'field not declared in schema' \
  bash -c "sed -e 's/^  backendFramework: vllm/  backendFramework: vllm\n  bogus: 1/' -e 's/name: vllm-agg-h100-dspark\$/name: bad2/' '$DGD' | $K -n $NS apply --server-side -f -"
check "delete Job (foreground) completes" timed 30 "$K" -n "$NS" delete job download --cascade=foreground
check "Job's Pods are gone" timed 30 bash -c "while [[ -n \$($K -n $NS get pods -l job-name=download -o name) ]]; do sleep 0.5; done"
check "delete PVC completes (pvc-protection finalizer)" timed 30 "$K" -n "$NS" delete pvc model-cache
check "delete DGD completes" timed 30 "$K" -n "$NS" delete dynamographdeployment vllm-agg-h100-dspark
check "delete namespace completes" timed 60 "$K" delete namespace "$NS"

echo "kube-local smoke: $passed passed, $failed failed"
((failed == 0))
