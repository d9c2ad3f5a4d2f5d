# toolledger — see README.md. `make help` lists the targets.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

BIN ?= $(CURDIR)/bin
CONTROLLER_GEN ?= $(BIN)/controller-gen
GOLANGCI_LINT ?= $(BIN)/golangci-lint
KUBE_APISERVER ?= $(BIN)/kube-apiserver
ETCD ?= $(BIN)/etcd
KUBECTL ?= $(BIN)/kubectl
STRIPE_MOCK ?= $(BIN)/stripe-mock
PROMTOOL ?= $(BIN)/promtool
HELM ?= $(BIN)/helm
# The node's components (make test-node), apart from the control plane's.
NODE_BIN ?= $(BIN)/node
COREDNS ?= $(NODE_BIN)/coredns
CHART_CRDS := charts/toolledger/crds

# envtest reads the control-plane binaries from here.
export KUBEBUILDER_ASSETS ?= $(BIN)
# The specs and the end-to-end suite run kubectl from PATH: the one built
# into bin/, whatever else the machine has.
export PATH := $(BIN):$(PATH)

.DEFAULT_GOAL := help

##@ General

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Regenerate deepcopy code, CRDs, RBAC, the chart's CRDs, rules, admission policy, alerts and dashboard, and Argo CD's argocd-cm patch.
	$(CONTROLLER_GEN) object paths="./api/..."
	$(CONTROLLER_GEN) crd rbac:roleName=toolledger-manager paths="./..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	rm -rf $(CHART_CRDS) && mkdir -p $(CHART_CRDS) && cp config/crd/bases/*.yaml $(CHART_CRDS)/
	cp config/crd/bases/toolledger.dev_toolactions.yaml internal/archiveapi/toolactions.crd.yaml
	$(MAKE) --no-print-directory chart-rbac
	$(MAKE) --no-print-directory chart-admission
	$(MAKE) --no-print-directory chart-observability
	$(MAKE) --no-print-directory argocd

.PHONY: verify
verify: generate ## Fail when generated files are stale or go.mod is untidy.
	go mod tidy
	@if [ -n "$$(git status --porcelain -- api config charts internal/archiveapi go.mod go.sum)" ]; then \
		echo "generated files are stale; run 'make generate' and 'go mod tidy' and commit:"; \
		git status --porcelain -- api config charts internal/archiveapi go.mod go.sum; git --no-pager diff --stat; exit 1; fi

.PHONY: fmt
fmt: ## Format the Go code.
	gofmt -s -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet and check formatting.
	@out="$$(gofmt -s -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "not gofmt'ed:"; echo "$$out"; exit 1; fi
	go vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint with .golangci.yml.
	$(GOLANGCI_LINT) run --allow-parallel-runners ./...

.PHONY: test
test: controlplane $(STRIPE_MOCK) $(HELM) $(PROMTOOL) chromium postgresql nodejs vet ## Run unit tests and the envtest suites (builds the control plane, stripe-mock, helm and promtool on first use; installs chromium, PostgreSQL and Node.js).
	go test ./... -race -count=1 -timeout 20m

# The web console's browser tests drive Debian's chromium (headless). It is a
# system package: installed with apt-get (as root, else through sudo) when
# missing, with a font for its pages.
.PHONY: chromium
chromium: ## Install Debian's chromium for the web console's browser tests, when it is missing.
	@command -v chromium >/dev/null || { \
		echo ">> installing Debian's chromium for the web console's browser tests"; \
		sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core; }

# The archive's tests run a real PostgreSQL server of Debian's postgresql
# package, started by the tests themselves (as nobody when run as root, which
# the server refuses), bound to 127.0.0.1. Installed like chromium.
.PHONY: postgresql
postgresql: ## Install Debian's PostgreSQL server for the archive (make run, the tests), when it is missing.
	@ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || { \
		echo ">> installing Debian's postgresql for the archive's tests"; \
		sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends postgresql; }

# The MCP gateway's tests drive it with the TypeScript MCP SDK's client,
# which runs on Debian's nodejs; the test installs the client's packages
# with npm ci from its package-lock.json. Installed like chromium.
.PHONY: nodejs
nodejs: ## Install Debian's nodejs and npm for the TypeScript MCP SDK's client in the tests, when missing.
	@command -v node >/dev/null && command -v npm >/dev/null || { \
		echo ">> installing Debian's nodejs and npm for the TypeScript MCP SDK's client"; \
		sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends nodejs npm; }

.PHONY: screenshots
screenshots: controlplane chromium ## Take the web console's screenshots of docs/images with the browser tests.
	TOOLLEDGER_SCREENSHOTS=$(CURDIR)/docs/images go test ./internal/webconsole/ -count=1 -ginkgo.focus "approver approve"

# USE_EXISTING_CLUSTER=true runs against the current kubeconfig's cluster instead.
ifeq ($(USE_EXISTING_CLUSTER),true)
RUN_DEPS := postgresql
else
RUN_DEPS := controlplane postgresql
endif

.PHONY: run
run: $(RUN_DEPS) ## Start a local control plane, the demo downstream and the operator (Ctrl-C stops all).
	go run ./cmd/toolledger-dev --egress-allow=127.0.0.1/32 $(RUN_ARGS)

##@ Build

.PHONY: build
build: ## Build the operator, the local runner, the demo downstream, the MCP gateway and the web console into bin/.
	go build -o $(BIN)/manager ./cmd/manager
	go build -o $(BIN)/toolledger-dev ./cmd/toolledger-dev
	go build -o $(BIN)/demo-downstream ./cmd/demo-downstream
	go build -o $(BIN)/toolledger-mcp ./cmd/toolledger-mcp
	go build -o $(BIN)/toolledger-console ./cmd/toolledger-console

.PHONY: controlplane
controlplane: $(KUBE_APISERVER) $(ETCD) $(KUBECTL) ## Build kube-apiserver, etcd and kubectl from source into bin/ (first time: minutes).

# The Kubernetes version hack/controlplane/go.mod pins, linked into every
# binary built from it: a plain build reports v0.0.0-master, which kubectl
# version cannot parse.
KUBE_VERSION := $(shell sed -n 's/^\tk8s.io\/kubernetes v\([0-9.]*\)$$/\1/p' hack/controlplane/go.mod)
KUBE_LDFLAGS := -X k8s.io/component-base/version.gitVersion=v$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=$(word 1,$(subst ., ,$(KUBE_VERSION))) \
	-X k8s.io/component-base/version.gitMinor=$(word 2,$(subst ., ,$(KUBE_VERSION))) \
	-X k8s.io/component-base/version.gitTreeState=clean
# kube-build builds the Kubernetes command $(1) from hack/controlplane into $@.
kube-build = cd hack/controlplane && go build -ldflags '$(KUBE_LDFLAGS)' -o $@ k8s.io/kubernetes/cmd/$(1)

$(KUBE_APISERVER): hack/controlplane/go.mod
	@echo ">> building kube-apiserver from source into $(BIN); the first build takes several minutes, later ones are cached"
	$(call kube-build,kube-apiserver)

$(ETCD): hack/controlplane/go.mod
	@echo ">> building etcd from source into $(BIN)"
	cd hack/controlplane && go build -o $@ go.etcd.io/etcd/server/v3

$(KUBECTL): hack/controlplane/go.mod
	@echo ">> building kubectl from source into $(BIN)"
	$(call kube-build,kubectl)

# The node's components: the kubelet, kube-proxy, the controller-manager and
# the scheduler from hack/controlplane, CoreDNS from hack/coredns.
NODE_COMMANDS := kubelet kube-proxy kube-controller-manager kube-scheduler
.PHONY: node-binaries
node-binaries: controlplane $(addprefix $(NODE_BIN)/,$(NODE_COMMANDS)) $(COREDNS) ## Build the node's components into bin/node (first time: about ten minutes).

$(addprefix $(NODE_BIN)/,$(NODE_COMMANDS)): $(NODE_BIN)/%: hack/controlplane/go.mod
	@echo ">> building $* from source into $(NODE_BIN)"
	$(call kube-build,$*)

$(COREDNS): hack/coredns/go.mod
	@echo ">> building CoreDNS from source into $(NODE_BIN)"
	cd hack/coredns && go build -o $@ github.com/coredns/coredns

$(GOLANGCI_LINT): hack/lint/go.mod
	cd hack/lint && go build -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

$(STRIPE_MOCK): hack/stripe-mock/go.mod
	cd hack/stripe-mock && go build -o $@ github.com/stripe/stripe-mock

$(PROMTOOL): hack/promtool/go.mod
	cd hack/promtool && go build -o $@ github.com/prometheus/prometheus/cmd/promtool

$(CONTROLLER_GEN): hack/tools/go.mod
	cd hack/tools && go build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

##@ Packaging

CHART_DIR := charts/toolledger
CHART_RBAC := $(CHART_DIR)/files/manager-rules.yaml
IMG ?= ghcr.io/toolledger/toolledger:latest
HELM_VERSION ?= v3.22.0
DOCKERFILELINT_VERSION ?= 1.8.0
DOCKERFILELINT ?= $(BIN)/npm/node_modules/.bin/dockerfilelint

.PHONY: chart-rbac
chart-rbac: ## Copy the rules of the generated ClusterRole (config/rbac/role.yaml) into the chart.
	@mkdir -p $(dir $(CHART_RBAC))
	{ echo "# Generated by 'make chart-rbac' from config/rbac/role.yaml: do not edit."; \
	  awk '/^rules:/ { r = 1; next } r && (/^---/ || /^[^ -]/) { r = 0 } r' config/rbac/role.yaml; } > $(CHART_RBAC).tmp
	@grep -q '^- apiGroups' $(CHART_RBAC).tmp || { rm -f $(CHART_RBAC).tmp; echo "no rules in config/rbac/role.yaml" >&2; exit 1; }
	mv $(CHART_RBAC).tmp $(CHART_RBAC)

# config/admission/<name>_policy.yaml is copied to files/<name>-policy.yaml.
CHART_ADMISSION := outcome_finalizer tombstone_guard identity parameters trace_context earlier_life earlier_life_stamp

.PHONY: chart-admission
chart-admission: ## Copy the admission policies (config/admission) into the chart.
	@mkdir -p $(CHART_DIR)/files
	for p in $(CHART_ADMISSION); do \
	  { echo "# Generated by 'make chart-admission' from config/admission/$${p}_policy.yaml: do not edit."; \
	    cat config/admission/$${p}_policy.yaml; } > $(CHART_DIR)/files/$${p//_/-}-policy.yaml; done

# The alerts keep a note (YAML has comments); the dashboard is copied as is.
.PHONY: chart-observability
chart-observability: ## Copy the Prometheus alerts (config/prometheus) and the Grafana dashboard (config/grafana) into the chart.
	@mkdir -p $(CHART_DIR)/files
	{ echo "# Generated by 'make chart-observability' from config/prometheus/alerts.yaml: do not edit."; \
	  cat config/prometheus/alerts.yaml; } > $(CHART_DIR)/files/alerts.yaml
	cp config/grafana/toolledger.json $(CHART_DIR)/files/dashboard.json

ARGOCD_HEALTH := config/argocd/toolledger.dev/ToolAction/health.lua

.PHONY: argocd
argocd: ## Write Argo CD's argocd-cm patch (config/argocd/argocd-cm.yaml) from the ToolAction health check.
	{ echo "# Generated by 'make argocd' from $(ARGOCD_HEALTH): do not edit."; \
	  echo "# Argo CD's health check for ToolAction (docs/operations.md#argo-cd):"; \
	  echo "#   kubectl -n argocd patch configmap argocd-cm --patch-file config/argocd/argocd-cm.yaml"; \
	  echo "data:"; \
	  echo "  resource.customizations.health.toolledger.dev_ToolAction: |"; \
	  sed -e 's/^\(.\)/    \1/' $(ARGOCD_HEALTH); } > config/argocd/argocd-cm.yaml

.PHONY: manifests-check
manifests-check: ## Build the kustomizations (config/default, config/samples) to check they render.
	kubectl kustomize config/default > /dev/null
	kubectl kustomize config/samples > /dev/null

.PHONY: install-manifest
install-manifest: ## Render config/default (with IMG as the image) into dist/install.yaml.
	@mkdir -p dist
	kubectl kustomize config/default | sed 's|image: ghcr.io/toolledger/toolledger:latest|image: $(IMG)|' > dist/install.yaml
	@echo "wrote dist/install.yaml (image $(IMG))"

.PHONY: chart-lint
chart-lint: $(HELM) chart-rbac chart-admission chart-observability ## Lint the Helm chart (what it renders is checked by go test ./test/chart, in make test).
	$(HELM) lint --strict $(CHART_DIR)

.PHONY: lint-dockerfile
lint-dockerfile: $(DOCKERFILELINT) ## Lint the Dockerfile with dockerfilelint (installed from npm into bin/).
	$(DOCKERFILELINT) Dockerfile

.PHONY: packaging-check
packaging-check: manifests-check chart-lint lint-dockerfile ## All packaging checks (no cluster or container engine needed).

.PHONY: docker-build
docker-build: ## Build the manager image as IMG (needs Docker with BuildKit).
	docker build -t $(IMG) .

$(HELM):
	GOBIN=$(BIN) go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

$(DOCKERFILELINT):
	npm install --no-audit --no-fund --no-save --prefix $(BIN)/npm dockerfilelint@$(DOCKERFILELINT_VERSION)

##@ Real node

NODE_TIMEOUT ?= 40m

# The node runs pods with Debian's containerd, runc and CNI plugins; kube-proxy
# needs iptables and conntrack. Installed like chromium.
.PHONY: node-packages
node-packages: ## Install Debian's containerd, runc, CNI plugins, iptables and conntrack for the node suite, when missing.
	@{ command -v containerd && command -v runc && command -v iptables && command -v conntrack && ls /usr/lib/cni/bridge; } >/dev/null 2>&1 || { \
		echo ">> installing Debian's containerd, runc, containernetworking-plugins, iptables and conntrack for the node suite"; \
		sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends \
			containerd runc containernetworking-plugins iptables conntrack; }

.PHONY: test-node
test-node: node-binaries $(HELM) node-packages postgresql ## Install the chart on a real single-node Kubernetes made on this machine (as root) and prove the ledger there; tears it all down.
	go test -tags node ./test/node/... -count=1 -v -timeout $(NODE_TIMEOUT)

##@ End-to-end

E2E_TIMEOUT ?= 30m

.PHONY: e2e-binaries
e2e-binaries: ## Build the manager, the demo downstream, the kubectl plugin and the web console into bin/ for the end-to-end suite.
	go build -o $(BIN)/manager ./cmd/manager
	go build -o $(BIN)/demo-downstream ./cmd/demo-downstream
	go build -o $(BIN)/toolledger-mcp ./cmd/toolledger-mcp
	go build -o $(BIN)/kubectl-toolledger ./cmd/kubectl-toolledger
	go build -o $(BIN)/toolledger-console ./cmd/toolledger-console

.PHONY: test-e2e
test-e2e: controlplane e2e-binaries ## Run the fault-injection suite on real processes; E2E_TRIALS=N for more trials, E2E_SEED to replay.
	go test -tags e2e ./test/e2e/... -count=1 -v -timeout $(E2E_TIMEOUT)

##@ Benchmarks

BENCH_ARGS ?=

.PHONY: bench
bench: controlplane ## Measure throughput against a controller's floor and a bare-client ceiling, latency, writes, duplicates, recovery and memory; writes docs/benchmarks.md and .png (about 90 min on 2 cores).
	go run ./test/bench $(BENCH_ARGS)

.PHONY: bench-smoke
bench-smoke: controlplane ## Run the benchmark harness with tiny counts (CI): fails on a harness error or a failed action, never on a number; writes bin/bench-smoke/.
	go run ./test/bench -smoke $(BENCH_ARGS)
