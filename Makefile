# crucible — see README.md.
GO        ?= go
BIN       := bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X crucible.dev/crucible/internal/cli.Version=$(VERSION)
# go test's per-package timeout; the whole suite needs far less (see README).
TEST_TIMEOUT ?= 30m

# golangci-lint's version is hack/build-tools.sh's GOLANGCI_VERSION.
LINT      := $(BIN)/golangci-lint-v2.15.0/golangci-lint

.PHONY: all tools build test unit lint bench fuzz dev vet clean chaos

all: build

## tools: build kube-apiserver, kube-scheduler, kube-controller-manager, kubectl, etcd and kwok once into bin/
tools:
	@hack/build-tools.sh

## build: build bin/crucible
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/crucible ./cmd/crucible

## test: every test, unit and end-to-end on real API servers (builds the tools first if missing)
test: tools
	$(GO) mod tidy -diff
	$(GO) vet ./...
	$(LINT) run ./...
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

## lint: go vet and golangci-lint (.golangci.yml); go.mod must be tidy
lint: tools
	$(GO) mod tidy -diff
	$(GO) vet ./...
	$(LINT) run ./...

## unit: the tests that need no tool binaries
unit:
	$(GO) test -count=1 -short ./...

## bench: benchmarks, reported as ratios against baselines measured in the same run
bench: tools
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./...

## chaos: faults injected under load (200 pods per scenario) on the dev stack; writes chaos/results.md and .json
chaos: tools
	CRUCIBLE_CHAOS=full CRUCIBLE_CHAOS_RESULTS=$(CURDIR)/chaos $(GO) test ./test/chaos -run Chaos -count=1 -v -timeout 90m

## dev: start a local hub and spoke in the foreground, run a sample turn through it; Ctrl-C stops it
dev: tools build
	$(BIN)/crucible dev up --sample

clean:
	rm -rf $(BIN)/crucible .dev
