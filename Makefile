# The README's two commands: `make up` (set-up, then `pulumi up --stack dev`) and `make test` (set-up, then every test).
SHELL := /bin/bash
.DEFAULT_GOAL := help

CACHE        ?= $(HOME)/.cache/dynamo-pulumi-toolchain
UV_VERSION   := 0.13.9
UV           := $(CACHE)/uv-$(UV_VERSION)/bin/uv
PY           := .venv/bin/python

# Local, credential-free Pulumi: pinned binaries from tools/toolchain.sh, file backend in the clone,
# no plugin downloads. The passphrase only protects the local dev/test stacks (no real secrets in them).
export PATH := $(CURDIR)/.tools/bin:$(PATH)
export PULUMI_SKIP_UPDATE_CHECK := true
export PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION := true
export PULUMI_BACKEND_URL ?= file://$(CURDIR)/.pulumi-state
export PULUMI_CONFIG_PASSPHRASE ?= dynamo-local-dev
export DYNAMO_TOOLCHAIN_CACHE ?= $(CACHE)

.PHONY: help setup python toolchain pulumi-toolchain kube-toolchain rig-toolchain prometheus-toolchain gateway-toolchain node-toolchain real-node-toolchain up local-up local-down test unit engine bench fidelity golden clean

help:
	@echo "make up    - set-up, then pulumi up --stack dev (renders manifests to ./rendered, no cloud account)"
	@echo "make test  - set-up, then every test (unit, mock, fidelity, engine against a local kube-apiserver)"
	@echo "make targets | render STACK=.. (or TARGET=..) | preflight STACK=.. | cost STACK=.. | simulate STACK=.. | diff [BASE=ref]"

$(UV):
	python3 -m venv $(CACHE)/uv-$(UV_VERSION)
	$(CACHE)/uv-$(UV_VERSION)/bin/pip install --quiet uv==$(UV_VERSION)

# Bytecode for what the program imports, written once (tools/warm_bytecode.py says why not --compile-bytecode); a
# second run finds every .pyc and takes about a second.
python: $(UV)
	$(UV) sync --locked
	$(PY) tools/warm_bytecode.py

# Pulumi CLI, language host and Kubernetes provider: all the dev stack (render mode) needs.
pulumi-toolchain:
	tools/toolchain.sh

# The local control plane the engine tests run against (not needed by `make up`), and the real Karpenter (KWOK
# cloud provider) that tests/test_karpenter_engine.py runs with it.
kube-toolchain:
	tools/kube-local.sh build
	tools/karpenter.sh build

# The Prometheus server tests/test_prometheus.py scrapes the serving rig with (pinned in stacks/registry/versions.yaml).
prometheus-toolchain:
	tools/prometheus.sh

# Envoy Gateway's egctl, whose offline translator tests/test_front_door_translate.py runs on the front door's objects.
gateway-toolchain:
	tools/egctl.sh

# nodeadm (EKS's AL2023 node bootstrap) from the reference data's source, which tests/test_nodeadm.py runs on every GPU
# node's user data (skipped, with the reason, where the reference data is absent).
node-toolchain:
	tools/nodeadm.sh

# The real node of the local control plane (tools/kube-node.sh): kubelet and kube-proxy built from the pinned Kubernetes
# module, containerd, runc, the CNI plugins and nft unpacked from pinned Debian packages, and the local images
# (tools/node/images.py), for tests/test_node.py and `make local-up`.
real-node-toolchain: python rig-toolchain kube-toolchain
	PY=$(CURDIR)/$(PY) tools/kube-node.sh build

toolchain: pulumi-toolchain kube-toolchain prometheus-toolchain gateway-toolchain node-toolchain real-node-toolchain

# The GPU-free serving rig's own locked Python env (real Dynamo frontend + mocker, AIPerf) for tests/test_rig.py.
rig-toolchain: $(UV)
	UV=$(UV) tools/rig.sh

setup: python toolchain rig-toolchain

up: python pulumi-toolchain
	mkdir -p .pulumi-state
	pulumi stack select dev --create --non-interactive
	pulumi up --stack dev --yes --non-interactive --skip-preview
	pulumi stack output --stack dev

# The same program against the local control plane with its real node (stack `local`; tools/kube-node.sh: Linux and
# root). The local stack reads a namespace and an HF token Secret made outside it (Pulumi.local.yaml): made here,
# idempotently; the token is HF_TOKEN from the environment, else a placeholder (the node's model hub needs none). The
# node is labelled as the stack's render asks (tools/node/placement.py), `up` waits for the download Job and the DGD,
# and the last step sends a chat completion to the real frontend (tools/node/smoke.py).
LOCAL_KUBECTL = .tools/bin/kubectl --kubeconfig .tools/kube/kubeconfig
local-up: python toolchain
	KUBE_LOCAL_NODE=1 tools/kube-local.sh start
	$(LOCAL_KUBECTL) create namespace dynamo-local --dry-run=client -o yaml | $(LOCAL_KUBECTL) apply -f -
	@$(LOCAL_KUBECTL) -n dynamo-local create secret generic hf-token-secret --from-literal=HF_TOKEN="$${HF_TOKEN:-unused-locally}" \
	  --dry-run=client -o yaml | $(LOCAL_KUBECTL) apply -f -
	.venv/bin/dynamo-stacks render --stack local | $(PY) tools/node/placement.py --kubeconfig .tools/kube/kubeconfig --kubectl .tools/bin/kubectl
	mkdir -p .pulumi-state
	pulumi stack select local --create --non-interactive
	pulumi up --stack local --yes --non-interactive --skip-preview
	.venv/bin/dynamo-stacks render --stack local | $(PY) tools/node/smoke.py --kubeconfig .tools/kube/kubeconfig --kubectl .tools/bin/kubectl

# --run-program: the program's after_delete hooks print what destroy keeps (the cache claim and its namespace), why,
# and how to delete or re-adopt each; the engine refuses a destroy without it once the state records those hooks.
# DYNAMO_DESTROY=1: a failed download Job does not stop the teardown (stacks/program/retained.py).
# The control plane is stopped either way; the exit status is the destroy's, so a failed destroy is not reported as done.
local-down:
	DYNAMO_DESTROY=1 pulumi destroy --stack local --yes --non-interactive --run-program; rc=$$?; \
	tools/kube-local.sh stop; exit $$rc

test: setup
	PY=$(PY) tools/test.sh

unit: python
	$(PY) -m pytest -m "not engine"

bench: setup
	$(PY) benchmarks/render_all.py
	$(PY) benchmarks/engine.py
	$(PY) benchmarks/engine_scale.py
	$(PY) benchmarks/simulate.py

fidelity: python
	$(PY) -m stacks fidelity

# The only way the URN golden files (tests/golden/urns-*.txt) change: run on purpose, review the printed diff.
golden: python
	$(PY) tests/update_golden.py

clean:
	rm -rf .venv .tools .pulumi-state rendered

# The common `dynamo-stacks` commands (the console script `make python` installs in .venv/bin; `--help` on each).
STACKS := .venv/bin/dynamo-stacks
BASE   ?= HEAD
.PHONY: targets render preflight cost simulate diff
need-stack = $(if $(STACK),,$(error set STACK=<name of a Pulumi.<name>.yaml>, e.g. make $@ STACK=h100-disagg))

targets: python
	@$(STACKS) targets --table

render: python
	@$(if $(STACK)$(TARGET),,$(error set STACK=<stack> or TARGET=<target id>, e.g. make render STACK=dev))
	@$(STACKS) render $(if $(STACK),--stack $(STACK),--target $(TARGET))

preflight: python
	@$(need-stack)
	@$(STACKS) preflight --stack $(STACK)

cost: python
	@$(need-stack)
	@$(STACKS) cost --stack $(STACK)

simulate: python
	@$(need-stack)
	@$(STACKS) simulate --stack $(STACK)

# What the working tree (or HEAD=<ref>) changes in every rendered stack and target against BASE (default HEAD).
diff: python
	@$(STACKS) diff --base $(BASE) $(if $(HEAD),--head $(HEAD))
