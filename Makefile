# crucible — see README.md.
GO        ?= go
BIN       := bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X crucible.dev/crucible/internal/cli.Version=$(VERSION)
# One set of build flags for crucible, its tests and the tools (hack/build-tools.sh
# uses the same), so that Go's build cache compiles the client-go and
# apimachinery packages they share once, not twice, on a fresh machine.
export CGO_ENABLED ?= 0
export GOFLAGS    ?= -trimpath

# go test's per-package timeout; the whole suite needs far less (see README).
TEST_TIMEOUT ?= 30m
# go test -shuffle: "on" (a new order each run, its seed printed) or a seed that replays one.
TEST_SHUFFLE ?= on

# golangci-lint's version is hack/build-tools.sh's GOLANGCI_VERSION.
LINT      := $(BIN)/golangci-lint-v2.15.0/golangci-lint

.PHONY: all tools dev-tools deps build image test acceptance unit lint bench chaos interop fleet fuzz dev vet clean

all: build

## tools: build kube-apiserver, kube-scheduler, kube-controller-manager, kubectl, etcd and kwok once into bin/
tools:
	@hack/build-tools.sh

# dev-tools: only the binaries the dev stack runs (what `make dev` needs first)
dev-tools:
	@hack/build-tools.sh dev

## build: build bin/crucible
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/crucible ./cmd/crucible

# The image: static binaries (no cgo), the build machine's CA bundle, user 65532, no shell.
IMAGE_PLATFORMS ?= linux/amd64 linux/arm64
IMAGE_DIR       ?= $(BIN)/image
IMAGE_SOURCE    ?= $(or $(shell git remote get-url origin 2>/dev/null),https://crucible.dev/crucible)
IMAGE_REVISION  ?= $(or $(shell git rev-parse HEAD 2>/dev/null),unknown)
IMAGE_CA_CERTS  ?= /etc/ssl/certs/ca-certificates.crt
SOURCE_DATE_EPOCH ?= $(or $(shell git log -1 --format=%ct 2>/dev/null),0)

## image: build crucible's OCI image for $(IMAGE_PLATFORMS) without Docker, as an OCI layout
##        ($(IMAGE_DIR)/oci) and an oci-archive tarball ($(IMAGE_DIR)/crucible-oci.tar)
image:
	@mkdir -p $(IMAGE_DIR)
	@set -e; bins=""; for p in $(IMAGE_PLATFORMS); do \
	  arch=$${p#linux/}; out=$(abspath $(IMAGE_DIR))/crucible-linux-$$arch; \
	  echo "image: building $$out"; \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o $$out ./cmd/crucible; \
	  bins="$$bins --binary $$p=$$out"; \
	done; \
	cd hack/tools/image && $(GO) run . $$bins --ca-certs $(IMAGE_CA_CERTS) \
	  --version $(VERSION) --source $(IMAGE_SOURCE) --revision $(IMAGE_REVISION) --created $(SOURCE_DATE_EPOCH) \
	  --layout $(abspath $(IMAGE_DIR))/oci --archive $(abspath $(IMAGE_DIR))/crucible-oci.tar
	@echo "image: $(IMAGE_DIR)/oci and $(IMAGE_DIR)/crucible-oci.tar ($(VERSION), $(IMAGE_PLATFORMS))"

## deps: the machine packages the tests need (PostgreSQL, Chromium, axe-core), installed when
##       run as root, otherwise named in one line each
deps:
	@bash .ci/install-postgres.sh
	@bash .ci/install-chromium.sh

## test: the unit tests, the end-to-end tests that share one stack and the dev stack's own, after lint
##       (builds the tools and installs the packages first if missing)
test: tools deps lint
	@# go test starts packages in the order named, two at a time on two cores: the longest first (the
	@# end-to-end package on its shared stack, then the dev stack's), so that the short ones fill
	@# whichever slot frees last instead of a long one starting late. golangci-lint's govet has just run
	@# go vet's analyzers on every package, tests included: -vet=off spares go test its repeat of a
	@# subset of them. The chaos subset, the UI's browser tests and the end-to-end tests that take a stack apart
	@# start stacks of their own and run in make acceptance.
	CRUCIBLE_E2E_STACKS=shared $(GO) test -count=1 -shuffle=$(TEST_SHUFFLE) -vet=off -timeout $(TEST_TIMEOUT) \
	  ./test/e2e ./internal/devstack $$($(GO) list ./... | grep -v -e '/test/chaos$$' -e '/test/ui$$')

## acceptance: the end-to-end tests that start a stack of their own (API auth modes, hub outages and
##             key rotation, reloads, requested tokens, run-live permissions, replicas on PostgreSQL),
##             two at a time, beside the chaos subset (faults under load, 20 pods per scenario) and the
##             web UI in headless Chromium; about 10 minutes
acceptance: tools deps
	CRUCIBLE_E2E_STACKS=own $(GO) test -count=1 -shuffle=$(TEST_SHUFFLE) -timeout $(TEST_TIMEOUT) ./test/e2e ./test/chaos ./test/ui

## interop: code nobody here wrote on the dev stack: Kueue v0.17.0's MultiKueue (manager on the hub, a
##          worker per spoke) dispatching Jobs through crucible's federation (about 3 minutes)
interop: tools
	$(GO) test -tags interop -count=1 -timeout 20m -run 'TestMultiKueue' -v ./test/e2e/

## fleet: ten spokes on the dev stack: one controller with 1,000 turn pods over all of them, a spoke removed
##        (drained) and an eleventh added by a profile reload mid-run, no restart; then three sharded replicas
##        on PostgreSQL, one killed under load, a fourth joining, one paused past its leases; and a hundred spokes
##        on four API servers (shared-server dev spokes): a pod on each, 50 out and 50 in by one reload, three
##        replicas 33-34 each, one SIGKILLed (about 11 minutes)
fleet: tools
	$(GO) test -tags fleet -count=1 -timeout 40m -run 'TestFleet' -v ./test/e2e/

## lint: golangci-lint (.golangci.yml; its govet runs go vet's analyzers, so go vet itself would
##       only repeat them); go.mod must be tidy
lint: tools
	$(GO) mod tidy -diff
	$(LINT) run --allow-parallel-runners ./...

## unit: the tests that need no tool binaries
unit:
	$(GO) test -count=1 -shuffle=on -short ./...

## bench: every benchmark, each bounded in time and count, reported as ratios against baselines measured
##        in the same run in bench/results.md and bench/results.json. Each runs 3 times (go test -count 3,
##        crucible and its baseline measured together in every run); a row is the median run (met reads it)
##        beside the min and max. reconcile, multikueue and placement-multikueue (report only)
##        and placement-quality run once. The whole suite takes about 2 h 20 on this machine's good days and
##        about 3 h 10 on its slow ones (the slow run of 2026-12-06: the light ones 18 min, dispatch 59,
##        fleet 38, fleet-100 about 21, fleet-replicas 5, reconcile 6, multikueue 5, placement-quality 7,
##        placement-multikueue 9; bench/results.json "runs" has the latest run's). benchreport starts each
##        only with its whole bound (timeout × runs) left of its -budget, 3h30: enough for every row on a
##        slow day (2h30 cut fleet-100 once and fleet-replicas twice), while a hung benchmark still ends
##        the run; the report says which rows a cut skipped.
##        BENCH=webhook (or a comma-separated list; see `go run ./hack/benchreport -list`) runs only those,
##        replacing their rows; BENCH_NOTE is a line for the report's header (say, how loaded the machine was)
BENCH      ?=
BENCH_NOTE ?=
bench: tools
	$(GO) run ./hack/benchreport -bench '$(BENCH)' -note '$(BENCH_NOTE)'

## chaos: faults injected under load (200 pods per scenario) on the dev stack; writes chaos/results.md and .json
chaos: tools
	CRUCIBLE_CHAOS=full CRUCIBLE_CHAOS_RESULTS=$(CURDIR)/chaos $(GO) test ./test/chaos -run Chaos -count=1 -v -timeout 90m

## dev: start a local hub and spoke in the foreground, run a sample turn through it; Ctrl-C stops it
dev: dev-tools build
	$(BIN)/crucible dev up --sample

clean:
	rm -rf $(BIN)/crucible .dev
