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
generate: $(CONTROLLER_GEN) ## Regenerate deepcopy code, CRDs, RBAC, and the chart's CRDs, rules, admission policy, alerts and dashboard.
	$(CONTROLLER_GEN) object paths="./api/..."
	$(CONTROLLER_GEN) crd rbac:roleName=toolledger-manager paths="./..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	rm -rf $(CHART_CRDS) && mkdir -p $(CHART_CRDS) && cp config/crd/bases/*.yaml $(CHART_CRDS)/
	$(MAKE) --no-print-directory chart-rbac
	$(MAKE) --no-print-directory chart-admission
	$(MAKE) --no-print-directory chart-observability

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

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint with .golangci.yml.
	$(GOLANGCI_LINT) run --allow-parallel-runners ./...

.PHONY: test
test: controlplane $(STRIPE_MOCK) $(HELM) $(PROMTOOL) chromium vet ## Run unit tests and the envtest suites (builds the control plane, stripe-mock, helm and promtool on first use; installs chromium).
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

.PHONY: screenshots
screenshots: controlplane chromium ## Take the web console's screenshots of docs/images with the browser tests.
	TOOLLEDGER_SCREENSHOTS=$(CURDIR)/docs/images go test ./internal/webconsole/ -count=1 -ginkgo.focus "approver approve"

# USE_EXISTING_CLUSTER=true runs against the current kubeconfig's cluster instead.
ifeq ($(USE_EXISTING_CLUSTER),true)
RUN_DEPS :=
else
RUN_DEPS := controlplane
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

$(KUBE_APISERVER):
	@echo ">> building kube-apiserver from source into $(BIN); the first build takes several minutes, later ones are cached"
	cd hack/controlplane && go build -o $@ k8s.io/kubernetes/cmd/kube-apiserver

$(ETCD):
	@echo ">> building etcd from source into $(BIN)"
	cd hack/controlplane && go build -o $@ go.etcd.io/etcd/server/v3

$(KUBECTL):
	@echo ">> building kubectl from source into $(BIN)"
	cd hack/controlplane && go build -o $@ k8s.io/kubernetes/cmd/kubectl

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
CHART_ADMISSION := outcome_finalizer tombstone_guard identity parameters

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
chart-lint: $(HELM) chart-rbac chart-admission chart-observability ## Lint the Helm chart and render it with default and non-default values.
	$(HELM) lint --strict $(CHART_DIR)
	$(HELM) template toolledger $(CHART_DIR) --namespace toolledger-system > /dev/null
	$(HELM) template toolledger $(CHART_DIR) --namespace toolledger-system \
		--set leaderElect=true --set metrics.enabled=false --set serviceAccount.create=false --set serviceAccount.name=sa > /dev/null
	$(HELM) template toolledger $(CHART_DIR) --namespace toolledger-system --set routineEvents=false \
		--api-versions admissionregistration.k8s.io/v1/MutatingAdmissionPolicy > $(BIN)/chart-mutating.yaml
	grep -q 'name: toolledger-outcome-finalizer' $(BIN)/chart-mutating.yaml && grep -q 'name: toolledger-identity' $(BIN)/chart-mutating.yaml \
		|| { echo "chart-lint: both MutatingAdmissionPolicies must render where the cluster serves them" >&2; exit 1; }
	grep -q -- '- --routine-events=false$$' $(BIN)/chart-mutating.yaml && $(HELM) template toolledger $(CHART_DIR) | grep -q -- '- --routine-events=true$$' \
		|| { echo "chart-lint: routineEvents must reach --routine-events" >&2; exit 1; }
	@# The impersonator ClusterRole is bound by a RoleBinding in each listed namespace and nowhere else.
	[ "$$($(HELM) template toolledger $(CHART_DIR) | grep -c 'name: toolledger-impersonator$$')" = 1 ] \
		&& out="$$($(HELM) template toolledger $(CHART_DIR) --namespace ops --set serviceAccount.name=ledger \
			--set 'kubernetesApply.namespaces={shop,billing}')" \
		&& [ "$$(grep -c 'name: toolledger-impersonator$$' <<<"$$out")" = 5 ] \
		&& grep -q '^  namespace: shop' <<<"$$out" && grep -q '^  namespace: billing' <<<"$$out" \
		|| { echo "chart-lint: the impersonator ClusterRole must be bound only by a RoleBinding in each of kubernetesApply.namespaces" >&2; exit 1; }
	@# The guard exempts the release's ServiceAccount and break-glass group, and no other.
	out="$$($(HELM) template toolledger $(CHART_DIR) --namespace ops --set serviceAccount.name=ledger \
		--set tombstoneGuard.breakGlassGroup=oncall --api-versions admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy)"; \
	[ "$$(grep -c '^kind: ValidatingAdmissionPolicyBinding' <<<"$$out")" = 2 ] \
		&& [ "$$(grep -c '"system:serviceaccount:ops:ledger"' <<<"$$out")" = 2 ] \
		&& [ "$$(grep -c '"oncall" in request.userInfo.groups' <<<"$$out")" = 2 ] \
		&& ! grep -qE 'toolledger-system|toolledger-controller-manager|toolledger:break-glass' <<<"$$out" \
		|| { echo "chart-lint: the guard policies must exempt the release's ServiceAccount and break-glass group only" >&2; exit 1; }
	@# Egress: no flags and no NetworkPolicy by default; the values reach the flags; the policy needs the API server's addresses.
	out="$$($(HELM) template toolledger $(CHART_DIR))"; ! grep -qE -- '--egress-|kind: NetworkPolicy' <<<"$$out" \
		&& out="$$($(HELM) template toolledger $(CHART_DIR) --set 'egress.allow={10.20.0.0/16}' --set 'egress.plainHTTP={127.0.0.1}' \
			--set networkPolicy.enabled=true --set 'networkPolicy.apiServerCIDRs={10.0.0.5/32}')" \
		&& grep -q -- '- --egress-allow=10.20.0.0/16$$' <<<"$$out" && grep -q -- '- --egress-plain-http=127.0.0.1$$' <<<"$$out" \
		&& grep -q 'name: toolledger-egress$$' <<<"$$out" && grep -q 'cidr: 10.0.0.5/32' <<<"$$out" \
		&& ! $(HELM) template toolledger $(CHART_DIR) --set networkPolicy.enabled=true >/dev/null 2>&1 \
		|| { echo "chart-lint: the egress values must reach the manager's flags and the NetworkPolicy, which needs networkPolicy.apiServerCIDRs" >&2; exit 1; }
	@# Monitoring: HTTPS metrics by default; the ServiceMonitor, PrometheusRule and dashboard ConfigMap render only when enabled.
	out="$$($(HELM) template toolledger $(CHART_DIR))"; grep -q -- '- --metrics-secure=true$$' <<<"$$out" \
		&& [ "$$(grep -c 'name: toolledger-metrics-reader$$' <<<"$$out")" = 1 ] \
		&& ! grep -qE '^kind: (ServiceMonitor|PrometheusRule)$$|grafana_dashboard' <<<"$$out" \
		|| { echo "chart-lint: by default the chart serves HTTPS metrics and renders no ServiceMonitor, PrometheusRule, dashboard or reader binding" >&2; exit 1; }
	out="$$($(HELM) template toolledger $(CHART_DIR) --set metrics.serviceMonitor.enabled=true)"; \
	[ "$$(grep -c '^kind: ServiceMonitor$$' <<<"$$out")" = 1 ] && grep -q 'scheme: https$$' <<<"$$out" \
		&& grep -q 'bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token$$' <<<"$$out" && grep -q 'insecureSkipVerify: true$$' <<<"$$out" \
		&& ! grep -qE '^kind: PrometheusRule$$|grafana_dashboard' <<<"$$out" \
		&& out="$$($(HELM) template toolledger $(CHART_DIR) --set metrics.serviceMonitor.enabled=true --set metrics.certSecret=metrics-tls)" \
		&& grep -q -- '- --metrics-cert-dir=' <<<"$$out" && grep -q 'secretName: metrics-tls$$' <<<"$$out" \
		&& grep -q 'serverName: toolledger-metrics.default.svc$$' <<<"$$out" && ! grep -q insecureSkipVerify <<<"$$out" \
		|| { echo "chart-lint: metrics.serviceMonitor.enabled must render one HTTPS ServiceMonitor, verifying metrics.certSecret's CA when set" >&2; exit 1; }
	out="$$($(HELM) template toolledger $(CHART_DIR) --set metrics.prometheusRule.enabled=true --set metrics.prometheusRule.labels.release=kps)"; \
	[ "$$(grep -c '^kind: PrometheusRule$$' <<<"$$out")" = 1 ] && grep -q '^    release: kps$$' <<<"$$out" && grep -q '^  groups:$$' <<<"$$out" \
		&& ! grep -qE '^kind: ServiceMonitor$$|grafana_dashboard' <<<"$$out" \
		|| { echo "chart-lint: metrics.prometheusRule.enabled must render one labelled PrometheusRule with the groups of files/alerts.yaml" >&2; exit 1; }
	out="$$($(HELM) template toolledger $(CHART_DIR) --set metrics.dashboard.enabled=true --set metrics.dashboard.namespace=grafana)"; \
	[ "$$(grep -c '^kind: ConfigMap$$' <<<"$$out")" = 1 ] && grep -q '^    grafana_dashboard: "1"$$' <<<"$$out" \
		&& grep -q '^  namespace: grafana$$' <<<"$$out" && grep -q '^  toolledger.json: |' <<<"$$out" \
		&& ! grep -qE '^kind: (ServiceMonitor|PrometheusRule)$$' <<<"$$out" \
		|| { echo "chart-lint: metrics.dashboard.enabled must render one ConfigMap with the dashboard, labelled grafana_dashboard: \"1\"" >&2; exit 1; }
	out="$$($(HELM) template toolledger $(CHART_DIR) --set metrics.secure=false --set metrics.serviceMonitor.enabled=true)"; \
	grep -q -- '- --metrics-secure=false$$' <<<"$$out" && grep -q 'scheme: http$$' <<<"$$out" && ! grep -qE 'bearerTokenFile|tlsConfig' <<<"$$out" \
		&& ! $(HELM) template toolledger $(CHART_DIR) --set metrics.enabled=false --set metrics.serviceMonitor.enabled=true >/dev/null 2>&1 \
		|| { echo "chart-lint: metrics.secure=false must reach --metrics-secure and the ServiceMonitor's scheme; a ServiceMonitor needs metrics.enabled" >&2; exit 1; }
	out="$$($(HELM) template toolledger $(CHART_DIR) --namespace ops --set 'metrics.reader.subjects[0].kind=ServiceAccount' \
		--set 'metrics.reader.subjects[0].name=prometheus-k8s' --set 'metrics.reader.subjects[0].namespace=monitoring')"; \
	[ "$$(grep -c 'name: toolledger-metrics-reader$$' <<<"$$out")" = 3 ] && grep -q '^    name: prometheus-k8s$$' <<<"$$out" \
		|| { echo "chart-lint: metrics.reader.subjects must be bound to the ClusterRole toolledger-metrics-reader" >&2; exit 1; }
	@# The MCP gateway renders only when enabled, needs its namespace and URL, and reads no namespace but the served one.
	out="$$($(HELM) template toolledger $(CHART_DIR))"; ! grep -q 'toolledger-mcp' <<<"$$out" \
		&& out="$$($(HELM) template toolledger $(CHART_DIR) --set mcpGateway.enabled=true --set mcpGateway.namespace=shop \
			--set mcpGateway.resourceURL=https://mcp.example.com/mcp --set 'mcpGateway.authorizationServers={https://issuer.example.com}')" \
		&& grep -q -- '- --namespace=shop$$' <<<"$$out" && grep -q -- '- --resource-url=https://mcp.example.com/mcp$$' <<<"$$out" \
		&& grep -q -- '- --authorization-server=https://issuer.example.com$$' <<<"$$out" && grep -q 'resourceNames: \["shop"\]' <<<"$$out" \
		&& grep -q 'app.kubernetes.io/component: mcp-gateway$$' <<<"$$out" && grep -q '^  namespace: shop$$' <<<"$$out" \
		&& ! $(HELM) template toolledger $(CHART_DIR) --set mcpGateway.enabled=true --set mcpGateway.namespace=shop >/dev/null 2>&1 \
		|| { echo "chart-lint: mcpGateway must render only when enabled, with its namespace and resourceURL required" >&2; exit 1; }
	@# The web console renders only when enabled, with its audience, its pods' own component label and a kept CSRF key.
	out="$$($(HELM) template toolledger $(CHART_DIR))"; ! grep -q 'toolledger-console' <<<"$$out" \
		&& out="$$($(HELM) template toolledger $(CHART_DIR) --set console.enabled=true --set console.namespace=shop --set console.tlsSecret=console-tls)" \
		&& grep -q -- '- --audience=toolledger-console$$' <<<"$$out" && grep -q -- '- --namespace=shop$$' <<<"$$out" \
		&& grep -q -- '- --tls-cert-file=/etc/toolledger-console/tls/tls.crt$$' <<<"$$out" && grep -q 'scheme: HTTPS$$' <<<"$$out" \
		&& grep -q 'app.kubernetes.io/component: console$$' <<<"$$out" && grep -q 'helm.sh/resource-policy: keep$$' <<<"$$out" \
		&& out="$$($(HELM) template toolledger $(CHART_DIR) --set console.enabled=true --set console.csrfSecret=mine)" \
		&& ! grep -q '^kind: Secret$$' <<<"$$out" && grep -q 'secretName: mine$$' <<<"$$out" && ! grep -q -- '--tls-cert-file' <<<"$$out" \
		&& ! $(HELM) template toolledger $(CHART_DIR) --set console.enabled=true --set console.audience= >/dev/null 2>&1 \
		|| { echo "chart-lint: console must render only when enabled, with its audience required, its own pod label, TLS when asked and a kept CSRF key unless one is given" >&2; exit 1; }

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

##@ End-to-end

E2E_TIMEOUT ?= 30m

.PHONY: e2e-binaries
e2e-binaries: ## Build the manager, the demo downstream and the kubectl plugin into bin/ for the end-to-end suite.
	go build -o $(BIN)/manager ./cmd/manager
	go build -o $(BIN)/demo-downstream ./cmd/demo-downstream
	go build -o $(BIN)/toolledger-mcp ./cmd/toolledger-mcp
	go build -o $(BIN)/kubectl-toolledger ./cmd/kubectl-toolledger

.PHONY: test-e2e
test-e2e: controlplane e2e-binaries ## Run the fault-injection suite on real processes; E2E_TRIALS=N for more trials, E2E_SEED to replay.
	go test -tags e2e ./test/e2e/... -count=1 -v -timeout $(E2E_TIMEOUT)

##@ Benchmarks

BENCH_ARGS ?=

.PHONY: bench
bench: controlplane ## Measure throughput against a bare-client ceiling, latency, writes, duplicates, recovery and memory; writes docs/benchmarks.md and .png (about 45 min on 2 cores).
	go run ./test/bench $(BENCH_ARGS)

.PHONY: bench-smoke
bench-smoke: controlplane ## Run the benchmark harness with tiny counts (CI): fails on a harness error or a failed action, never on a number; writes bin/bench-smoke/.
	go run ./test/bench -smoke $(BENCH_ARGS)
