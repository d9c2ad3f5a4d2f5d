# toolledger — see README.md. `make help` lists the targets.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

BIN ?= $(CURDIR)/bin
CONTROLLER_GEN ?= $(BIN)/controller-gen
KUBE_APISERVER ?= $(BIN)/kube-apiserver
ETCD ?= $(BIN)/etcd
CHART_CRDS := charts/toolledger/crds

# envtest reads the control-plane binaries from here.
export KUBEBUILDER_ASSETS ?= $(BIN)

.DEFAULT_GOAL := help

##@ General

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Regenerate deepcopy code, CRDs, RBAC and the chart's CRDs.
	$(CONTROLLER_GEN) object paths="./api/..."
	$(CONTROLLER_GEN) crd rbac:roleName=toolledger-manager paths="./..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	rm -rf $(CHART_CRDS) && mkdir -p $(CHART_CRDS) && cp config/crd/bases/*.yaml $(CHART_CRDS)/

.PHONY: verify
verify: generate ## Fail when generated files are stale or go.mod is untidy.
	go mod tidy
	@if [ -n "$$(git status --porcelain -- api config charts go.mod go.sum)" ]; then \
		echo "generated files are stale; run 'make generate' and 'go mod tidy' and commit:"; \
		git status --porcelain -- api config charts go.mod go.sum; git --no-pager diff --stat; exit 1; fi

.PHONY: fmt
fmt: ## Format the Go code.
	gofmt -s -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet and check formatting.
	@out="$$(gofmt -s -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "not gofmt'ed:"; echo "$$out"; exit 1; fi
	go vet ./...

.PHONY: test
test: controlplane vet ## Run unit tests and the envtest suites (builds the control plane on first use).
	go test ./... -race -count=1 -timeout 20m

# USE_EXISTING_CLUSTER=true runs against the current kubeconfig's cluster instead.
ifeq ($(USE_EXISTING_CLUSTER),true)
RUN_DEPS :=
else
RUN_DEPS := controlplane
endif

.PHONY: run
run: $(RUN_DEPS) ## Start a local control plane, the demo downstream and the operator (Ctrl-C stops all).
	go run ./cmd/toolledger-dev $(RUN_ARGS)

##@ Build

.PHONY: build
build: ## Build the operator, the local runner and the demo downstream into bin/.
	go build -o $(BIN)/manager ./cmd/manager
	go build -o $(BIN)/toolledger-dev ./cmd/toolledger-dev
	go build -o $(BIN)/demo-downstream ./cmd/demo-downstream

.PHONY: controlplane
controlplane: $(KUBE_APISERVER) $(ETCD) ## Build kube-apiserver and etcd from source into bin/ (first time: minutes).

$(KUBE_APISERVER):
	@echo ">> building kube-apiserver from source into $(BIN); the first build takes several minutes, later ones are cached"
	cd hack/controlplane && go build -o $@ k8s.io/kubernetes/cmd/kube-apiserver

$(ETCD):
	@echo ">> building etcd from source into $(BIN)"
	cd hack/controlplane && go build -o $@ go.etcd.io/etcd/server/v3

$(CONTROLLER_GEN): hack/tools/go.mod
	cd hack/tools && go build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen
