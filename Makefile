# Slicer — developer entry points. The README documents two commands:
#   make demo   the whole flow with emulated GPUs
#   make test   unit + integration tests (needs nothing preinstalled but Go;
#               builds the control-plane binaries it uses, once)
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := build

ROOT       := $(shell pwd)
BIN        := $(ROOT)/bin
TOOLS      := $(BIN)/tools
K8S_BIN    := $(BIN)/k8s
GO         ?= go
export CGO_ENABLED ?= 1
export GOFLAGS ?= -mod=readonly

CONTROLLER_GEN := $(TOOLS)/controller-gen
GOLANGCI_LINT  := $(TOOLS)/golangci-lint
DASHBOARD_LINTER := $(TOOLS)/dashboard-linter
KUSTOMIZE      := $(TOOLS)/kustomize
HELM           := $(TOOLS)/helm
MKIMAGE        := $(TOOLS)/mkimage
RELAY          := $(TOOLS)/relay
CONTAINER_ENGINE ?= $(shell command -v podman 2>/dev/null || command -v docker 2>/dev/null)
VERSION        ?= 0.2.0
IMAGE_REGISTRY ?= quay.io/slicer-operator
IMAGE_COMPONENTS := operator scheduler webhook agent

# Supported Kubernetes minors (docs/design/k8s-minors.md): the main module builds for the
# minor of its k8s.io/kubernetes (the newest); every older one has a nested module
# scheduler/k8s-1.N that rebuilds the scheduler against that minor. The list comes from those
# two places only.
K8S_MAIN_MINOR := $(shell awk '$$1=="k8s.io/kubernetes"{split(substr($$2,2),v,"."); print v[1]"."v[2]; exit}' go.mod)
K8S_OLDER_MINORS := $(patsubst scheduler/k8s-%/go.mod,%,$(wildcard scheduler/k8s-1.*/go.mod))
K8S_MINORS := $(K8S_OLDER_MINORS) $(K8S_MAIN_MINOR)
# Minors test-minors covers ("older": all but the main module's); make test runs the oldest
# here and the main module's in test-go.
TEST_MINORS ?= $(firstword $(K8S_MINORS))
override TEST_MINORS := $(if $(filter older,$(TEST_MINORS)),$(K8S_OLDER_MINORS),$(TEST_MINORS))
# Per minor: the module the scheduler is built in, its build tag, and its envtest binaries.
minor_mod = $(if $(filter $(K8S_MAIN_MINOR),$(1)),.,scheduler/k8s-$(1))
minor_tag = k8s_$(subst .,_,$(1))
minor_k8s_bin = $(if $(filter $(K8S_MAIN_MINOR),$(1)),$(K8S_BIN),$(BIN)/k8s-$(1))
$(foreach m,$(TEST_MINORS),$(if $(filter $(m),$(K8S_MINORS)),,$(error TEST_MINORS: $(m) is not a supported minor ($(K8S_MINORS)))))
SLICER_MOD := github.com/slicer-operator/slicer

# Packages with a main function, outside hack/ (hack/ holds nested modules).
MAIN_PKGS = $(shell $(GO) list -f '{{if eq .Name "main"}}{{.ImportPath}}{{end}}' ./... | grep -v /hack/)
TEST_FLAGS ?= -race -count=1
# The link flags of every test binary: -w leaves out the DWARF tables, which no test reads
# (stack traces, race reports and runtime.FuncForPC read the pcln table, which stays). A test
# binary is linked on every run (-count=1 or not; only its result is cached): about 17 % less
# link CPU for the large -race binaries (docs/ci.md).
TEST_LDFLAGS ?= -ldflags=-w
GO_TEST_TIMEOUT ?= 30m
# The nested modules test-nested runs with TEST_FLAGS, in this order; then hack/olm, whose tests
# need OLM's build tag (the one hack/build-olm.sh builds with) and run without -race.
NESTED_TEST_MODS := nfd-rules/evaltest driver-container/parsetest images/parsetest hack/tools/bundlevalidate hack/tools/relay hack/tools/mkimage
OLM_TEST_TAGS := containers_image_openpgp
# The flags of a test run that reach the compiler (and so the Go build cache's keys), for the
# compile ahead of a stage (precompile-*, below): the rest (-count, -p, -timeout, -ldflags, -v)
# act on the link or the run.
test_compile_flags = $(filter -race -msan -asan -cover -covermode=% -coverpkg=% -gcflags=% -tags=%,$(1))

.PHONY: help
help: ## Show the targets.
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-22s %s\n", $$1, $$2}'

##@ Build

# No -trimpath in the builds of bin/ (here and build-scheduler-*): -trimpath changes every
# package's build cache key, so a package compiled for `make verify` (go vet and golangci-lint
# compile the dependencies without it) or for test-minors would be compiled again for the
# binary. Without it the builds share the Go cache with them (docs/ci.md, "What a cold run
# compiles"). The images (images/*.Containerfile) keep -trimpath.
.PHONY: build
build: ## Build every binary into bin/.
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $(MAIN_PKGS)

.PHONY: build-schedulers $(addprefix build-scheduler-,$(K8S_MINORS))
build-schedulers: $(addprefix build-scheduler-,$(K8S_MINORS)) ## slicer-scheduler for every supported minor: bin/slicer-scheduler-k8s-1.N.
$(addprefix build-scheduler-,$(K8S_MINORS)): build-scheduler-%:
	@mkdir -p $(BIN)
	cd $(call minor_mod,$*) && $(GO) build -tags $(call minor_tag,$*) -o $(BIN)/slicer-scheduler-k8s-$* $(SLICER_MOD)/scheduler/cmd/slicer-scheduler

##@ Generate

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs into config/crd/bases and the operator's RBAC into config/rbac.
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=slicer-operator paths=./operator/... output:rbac:artifacts:config=config/rbac

.PHONY: metrics-doc
metrics-doc: ## Regenerate docs/metrics.md from the components' metrics.
	$(GO) run ./hack/metricsdoc -out docs/metrics.md

.PHONY: bundle
bundle: ## Generate the OLM bundle (bundle/) from config/ and hack/bundle.
	$(GO) run ./hack/bundle

.PHONY: chart
chart: ## Generate the Helm chart (charts/slicer) from config/ and hack/bundle/release.yaml.
	$(GO) run ./hack/chart

.PHONY: external-crds
external-crds: ## Copy NFD, KMM and Prometheus-operator CRDs from the pinned modules.
	hack/sync-external-crds.sh

.PHONY: verify
verify: verify-generated vet lint ## Fail on stale or hand-edited generated files; vet; lint.

.PHONY: verify-generated
verify-generated: $(CONTROLLER_GEN) ## Regenerate everything and fail if any generated file changed.
	hack/verify-clean.sh

# Every nested module (per-minor schedulers, hack/k8s-bin*, hack/{containerd,kmm,kueue,nfd,olm},
# hack/tools/*, the parse and rule tests): found by their go.mod, so a new one is checked too.
NESTED_MODS = $(patsubst %/go.mod,%,$(wildcard */*/go.mod hack/tools/*/go.mod))

.PHONY: vet
vet: ## go mod tidy check of the main and every nested module, and go vet every package.
	$(GO) mod tidy -diff
	for d in $(NESTED_MODS); do (cd $$d && $(GO) mod tidy -diff) || { echo "vet: go mod tidy -diff failed in $$d" >&2; exit 1; }; done
	$(GO) vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## golangci-lint with .golangci.yml.
	$(GOLANGCI_LINT) run ./...

##@ Test

.PHONY: envtest-bin
envtest-bin: ## Build kube-apiserver and etcd from source into bin/k8s (once).
	hack/build-k8s-bin.sh etcd kube-apiserver

.PHONY: prometheus-bin
prometheus-bin: ## Debian's prometheus + promtool into bin/prometheus (once).
	hack/install-prometheus.sh

.PHONY: test
test: test-go test-minors test-nested test-e2e ## Everything: test-go, test-minors (oldest minor), test-nested, then (as root) test-e2e.

# go test runs at most -p (the CPU count) test binaries at once and starts them in the order
# given, so the longest suites go first: started last, the operator suite (about 650 s of the
# stage's 1,320 s of test time on 2 cores) ran alone at the end. Slowest first, as CI's last run
# timed them; a package listed twice runs once.
GO_TEST_FIRST := ./test/integration/operator ./internal/mig ./test/integration/dra ./test/integration/ha \
	./test/integration/scheduler ./test/integration/monitoring ./test/integration/agent
GO_TEST_PKGS ?= $(GO_TEST_FIRST) $$($(GO) list ./... | grep -v -e /test/e2e -e /test/olm)
# One test binary more than the CPUs (go test's default is as many): the integration suites
# spend much of their time waiting on their control planes (CI's last run left 605 of the
# stage's 2,038 CPU-seconds idle on 2 cores). All passed with 3 on 2 cores at load average 8-13.
GO_TEST_P ?= $(shell echo $$(( $$(nproc) + 1 )))

.PHONY: test-go
test-go: envtest-bin prometheus-bin $(DASHBOARD_LINTER) $(KUSTOMIZE) $(HELM) ## The main module's tests but test/e2e and test/olm (GO_TEST_PKGS).
	KUBEBUILDER_ASSETS=$(K8S_BIN) $(GO) test $(TEST_FLAGS) $(TEST_LDFLAGS) -p $(GO_TEST_P) -timeout $(GO_TEST_TIMEOUT) $(GO_TEST_PKGS)

# The e2e suite runs the stack as pods on the local node (root only; as any other user it
# skips itself and says why). It needs the node's binaries, Slicer's and the images. Then,
# sequentially (one local node per machine), the OLM suite (test/olm, docs/olm-testing.md):
# install through a Subscription, upgrade to the current bundle pinned by digest while MIG
# pods run, uninstall. It needs OLM (olm-bin), the relay and every minor's scheduler (the
# bundle pins every image it names); the released binaries only for OLM_FROM=released.
# test/e2e/dra brings its own node: one Slicer per cluster, there with spec.frontend DRA.
.PHONY: test-e2e e2e-deps e2e-suites test-e2e-suite
test-e2e: e2e-deps ## End-to-end suites on the local single-node cluster: test/e2e, test/e2e/dra (DRA frontend), test/olm, then test-kmm (root; see test/e2e, test/olm).
	@for s in $(E2E_SUITES); do $(MAKE) --no-print-directory test-e2e-suite E2E_SUITE=$$s || exit 1; done
	$(MAKE) --no-print-directory test-kmm

# The suites in the order test-e2e runs them; .ci/run runs (and retries) them one by one.
E2E_SUITES := test/e2e test/e2e/dra test/olm
e2e-suites:
	@echo $(E2E_SUITES)

e2e-deps:
	@if [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory local-cluster-deps local-cluster-bin build build-schedulers olm-bin relay kueue-bin helm; fi

test-e2e-suite: ## One end-to-end suite alone: E2E_SUITE=test/e2e, test/e2e/dra or test/olm (built by e2e-deps).
	@[ -n "$(E2E_SUITE)" ] || { echo "test-e2e-suite: set E2E_SUITE to one of: $(E2E_SUITES)" >&2; exit 2; }
	$(GO) test -v -count=1 -timeout $(if $(filter test/e2e,$(E2E_SUITE)),40m,20m) ./$(E2E_SUITE)/ -ginkgo.v

# KMM's own manager on the local node with no-op images: its ready label lets the agent on
# (hack/kmm/run.sh, docs/design/kmm.md). Root only; as any other user it says so and skips.
.PHONY: test-kmm
test-kmm: ## KMM's manager gates the agent with its ready label, no-op worker (root; see docs/design/kmm.md).
	@if [ "$$(id -u)" = 0 ]; then hack/kmm/run.sh; else echo "*** test-kmm SKIPPED: hack/kmm/run.sh needs root (the local node) ***" >&2; fi

# test/olm alone. By default it upgrades from a "previous" bundle (the current one as
# v0.1.99); OLM_FROM=released upgrades from the released v0.1.0 instead, which does not run
# honestly on a loopback-only node (docs/olm-testing.md).
.PHONY: test-olm
test-olm: ## OLM install, upgrade and uninstall on the local node (root; OLM_FROM=released: from v0.1.0; see test/olm).
	@if [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory local-cluster-deps local-cluster-bin build build-schedulers olm-bin relay $(if $(filter released,$(OLM_FROM)),released-bin); fi
	$(GO) test -v -count=1 -timeout 20m ./test/olm/ -ginkgo.v

# .ci/run starts this in the background at nice 19 right after `go mod download` (make -k: one
# item that fails does not stop the next), so that the CPU the stages in front leave idle does
# later stages' compiling (docs/ci.md, "Where the idle CPU goes"). In the order .ci/run needs
# them: the end-to-end stage's binaries first, the last it needs first (e2e-deps builds from the
# other end, so the two meet rather than wait on each other); then, while the end-to-end suites
# wait on pods, the packages of the stages after them: test-go's (with -race), the older minors'
# kube-apiserver and etcd, test-minors' and test-nested's. Each binary goes through its
# stamp-keyed script, which holds a lock on its output folder: a stage that needs one still being
# built waits for it, then finds the stamp. The precompile-* items only fill the Go build cache
# (`go list -export` compiles and links nothing), so a stage that starts before one ends
# compiles the rest itself, and one that fails costs nothing but the time.
CI_PREBUILD = ci-kmm-bin kueue-bin olm-bin nfd-bin ci-containerd-bin ci-node-bin \
	precompile-test-go $(addprefix envtest-bin-,$(K8S_OLDER_MINORS)) \
	$(addprefix precompile-minor-,$(K8S_OLDER_MINORS)) precompile-nested
.PHONY: ci-prebuild ci-kmm-bin ci-containerd-bin ci-node-bin
ci-prebuild: $(CI_PREBUILD)
ci-kmm-bin:
	hack/kmm/build.sh
ci-containerd-bin:
	hack/build-containerd.sh
ci-node-bin:
	hack/build-k8s-bin.sh etcd kube-apiserver kube-controller-manager kubectl kubelet kube-scheduler

# The compile of a stage's tests ahead of it, into the Go build cache only: `go list -export`
# compiles every package the stage's test binaries are linked from, with the flags that reach
# the compiler (test_compile_flags), and links nothing (a test binary is linked by each run).
.PHONY: precompile-test-go precompile-nested $(addprefix precompile-minor-,$(K8S_MINORS))
precompile-test-go: ## Compile (no link, no run) what test-go's test binaries are made of.
	$(GO) list -export -test -deps $(call test_compile_flags,$(TEST_FLAGS)) $(GO_TEST_PKGS) >/dev/null
$(addprefix precompile-minor-,$(K8S_MINORS)): precompile-minor-%:
	cd $(call minor_mod,$*) && $(GO) list -export -test -deps $(call test_compile_flags,$(MINOR_TEST_FLAGS)) -tags $(call minor_tag,$*) $(MINOR_IT_PKGS) $(MINOR_UNIT_PKGS) >/dev/null
precompile-nested: $(addprefix precompile-nested-,$(NESTED_TEST_MODS))
	cd hack/olm && $(GO) list -export -test -deps -tags $(OLM_TEST_TAGS) ./... >/dev/null
.PHONY: $(addprefix precompile-nested-,$(NESTED_TEST_MODS))
$(addprefix precompile-nested-,$(NESTED_TEST_MODS)): precompile-nested-%:
	cd $* && $(GO) list -export -test -deps $(call test_compile_flags,$(TEST_FLAGS)) ./... >/dev/null

.PHONY: olm-bin
olm-bin: ## OLM v0 (olm, catalog) and our catalog-server, render-catalog from hack/olm into bin/olm (once).
	hack/build-olm.sh

.PHONY: kueue-bin
kueue-bin: ## Kueue's manager and its release's CRDs and webhook manifests from hack/kueue into bin/kueue (once; test/e2e's Kueue spec).
	hack/build-kueue.sh

.PHONY: released-bin
released-bin: ## The released versions' binaries from their own source into bin/released/VERSION (once).
	for v in $(patsubst hack/bundle/released/%/commit,%,$(wildcard hack/bundle/released/*/commit)); do hack/build-released.sh $$v; done

.PHONY: test-nested $(addprefix test-nested-,$(NESTED_TEST_MODS))
test-nested: $(addprefix test-nested-,$(NESTED_TEST_MODS)) ## Nested modules: NFD's rule engine, BuildKit's Containerfile parser, the OLM bundle validators, the relay, mkimage's image checks, the catalog's shape.
	cd hack/olm && $(GO) test -count=1 $(TEST_LDFLAGS) -tags $(OLM_TEST_TAGS) ./...
$(addprefix test-nested-,$(NESTED_TEST_MODS)): test-nested-%:
	cd $* && $(GO) test $(TEST_FLAGS) $(TEST_LDFLAGS) ./...

# Per minor in TEST_MINORS: the packages the scheduler is built from, unit-tested in that
# minor's module, and the scheduler integration suite against a kube-apiserver and etcd of that
# minor (built from hack/k8s-bin-1.N into bin/k8s-1.N, once). internal/mig/migdra and
# internal/slicemap (which reads claims through it) are left out: they spell DRA objects in the
# main module's resource.k8s.io/v1 (1.37), and the scheduler builds import neither.
MINOR_UNIT_PKGS = $$($(GO) list $(addprefix $(SLICER_MOD)/,scheduler/... api/... internal/...) | grep -v -e /internal/mig/migdra -e /internal/slicemap)
# The integration suite is listed first: it is the longest (about 70 s), see GO_TEST_FIRST.
MINOR_IT_PKGS = $(SLICER_MOD)/test/integration/scheduler
# The flags of the minors' test runs (.ci/run: without -race; the main module runs the same code
# with it), and of their compile ahead (precompile-minor-%).
MINOR_TEST_FLAGS ?= $(TEST_FLAGS)

.PHONY: test-minors
test-minors: $(addprefix test-minor-,$(TEST_MINORS)) ## The scheduler's tests per Kubernetes minor (TEST_MINORS="1.35 1.36").

.PHONY: $(addprefix test-minor-,$(K8S_MINORS))
$(addprefix test-minor-,$(K8S_MINORS)): test-minor-%: envtest-bin-%
	cd $(call minor_mod,$*) && KUBEBUILDER_ASSETS=$(call minor_k8s_bin,$*) $(GO) test $(MINOR_TEST_FLAGS) $(TEST_LDFLAGS) -tags $(call minor_tag,$*) -timeout $(GO_TEST_TIMEOUT) $(MINOR_IT_PKGS) $(MINOR_UNIT_PKGS)

.PHONY: $(addprefix envtest-bin-,$(K8S_MINORS))
$(addprefix envtest-bin-,$(K8S_MINORS)): envtest-bin-%: ## kube-apiserver and etcd of minor 1.N into bin/k8s-1.N (the main module's into bin/k8s), once.
	K8S_MINOR=$(if $(filter $(K8S_MAIN_MINOR),$*),,$*) hack/build-k8s-bin.sh etcd kube-apiserver

.PHONY: test-unit
test-unit: ## Unit tests only (no control plane).
	$(GO) test $(TEST_FLAGS) $(TEST_LDFLAGS) $$($(GO) list ./... | grep -v /test/)

##@ Images

.PHONY: images
images: ## Build the component images (images/*.Containerfile; the scheduler's per Kubernetes minor) with podman or docker.
	@[ -n "$(CONTAINER_ENGINE)" ] || { echo "make images: neither podman nor docker is installed (images-local assembles them without one)" >&2; exit 2; }
	for c in $(filter-out scheduler,$(IMAGE_COMPONENTS)); do $(CONTAINER_ENGINE) build -f images/$$c.Containerfile --build-arg VERSION=$(VERSION) -t $(IMAGE_REGISTRY)/slicer-$$c:v$(VERSION) . || exit 1; done
	for m in $(K8S_MINORS); do $(CONTAINER_ENGINE) build -f images/scheduler.Containerfile --build-arg VERSION=$(VERSION) --build-arg K8S_MINOR=$$m -t $(IMAGE_REGISTRY)/slicer-scheduler:v$(VERSION)-k8s-$$m . || exit 1; done

.PHONY: images-local
images-local: build build-schedulers $(MKIMAGE) ## localhost/slicer-<component>:dev (scheduler: dev-k8s-1.N) OCI archives in .local/images, without a container engine.
	images/local.sh

##@ Local node (root; loopback only; see docs/local-cluster.md)

LOCAL_CLUSTER := hack/local-cluster

.PHONY: local-cluster-deps local-cluster-bin nfd-bin local-cluster-up local-cluster-down local-cluster-smoke demo-down
local-cluster-deps: ## Install the Debian packages the local node needs.
	$(LOCAL_CLUSTER) deps
local-cluster-bin: $(MKIMAGE) ## Build kubelet, kcm, kubectl, kube-scheduler, etcd, apiserver, containerd 2, NFD (once).
	$(LOCAL_CLUSTER) build
nfd-bin: ## Build NFD's nfd-master and nfd-worker (hack/nfd) into bin/nfd (once; part of local-cluster-bin).
	hack/build-nfd.sh
local-cluster-up: local-cluster-bin ## Loopback-only single node; KUBECONFIG=.local/kubeconfig.
	$(LOCAL_CLUSTER) up --default-scheduler
local-cluster-down: ## Stop the local node and restore the host.
	$(LOCAL_CLUSTER) down
local-cluster-smoke: local-cluster-bin ## Fresh up, pods, down, host restored.
	$(LOCAL_CLUSTER) smoke
demo-down: ## Stop the demo cluster and restore the host.
	hack/demo down

##@ Demo

.PHONY: demo
demo: ## The whole flow on emulated GPUs: local node, Slicer from its manifests, a workload, the slice map (root; FRONTEND=DRA for the DRA frontend).
	SLICER_FRONTEND=$(FRONTEND) hack/demo run

##@ Tools (pinned in hack/tools/*/go.mod, built into bin/tools)

$(CONTROLLER_GEN): hack/tools/controller-gen/go.mod hack/tools/controller-gen/go.sum
	@mkdir -p $(TOOLS)
	cd hack/tools/controller-gen && $(GO) build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

$(DASHBOARD_LINTER): hack/tools/dashboard-linter/go.mod hack/tools/dashboard-linter/go.sum
	@mkdir -p $(TOOLS)
	cd hack/tools/dashboard-linter && $(GO) build -o $@ github.com/grafana/dashboard-linter

$(KUSTOMIZE): hack/tools/kustomize/go.mod hack/tools/kustomize/go.sum
	@mkdir -p $(TOOLS)
	cd hack/tools/kustomize && $(GO) build -o $@ sigs.k8s.io/kustomize/kustomize/v5

$(HELM): hack/tools/helm/go.mod hack/tools/helm/go.sum
	@mkdir -p $(TOOLS)
	cd hack/tools/helm && $(GO) build -ldflags "-X helm.sh/helm/v4/internal/version.version=$$(awk '$$1=="helm.sh/helm/v4"{print $$2}' go.mod)" -o $@ helm.sh/helm/v4/cmd/helm

.PHONY: helm
helm: $(HELM) ## bin/tools/helm, the Helm CLI the chart's tests lint, render and install with.

$(MKIMAGE): hack/tools/mkimage/go.mod hack/tools/mkimage/go.sum $(wildcard hack/tools/mkimage/*.go)
	@mkdir -p $(TOOLS)
	cd hack/tools/mkimage && $(GO) build -o $@ .

$(RELAY): hack/tools/relay/go.mod hack/tools/relay/main.go
	@mkdir -p $(TOOLS)
	cd hack/tools/relay && $(GO) build -o $@ .

.PHONY: relay
relay: $(RELAY) ## bin/tools/relay, the loopback/unix-socket relay of hack/netns-run.

$(GOLANGCI_LINT): hack/tools/golangci-lint/go.mod hack/tools/golangci-lint/go.sum
	@mkdir -p $(TOOLS)
	cd hack/tools/golangci-lint && $(GO) build -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

.PHONY: clean
clean: ## Remove build outputs (keeps the control-plane binaries in bin/k8s).
	find $(BIN) -maxdepth 1 -type f -delete 2>/dev/null || true
	rm -rf $(TOOLS)
