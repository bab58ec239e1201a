# crucible — see README.md.
GO        ?= go
BIN       := bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X crucible.dev/crucible/internal/cli.Version=$(VERSION)
# go test's per-package timeout; the whole suite needs far less (see README).
TEST_TIMEOUT ?= 30m

.PHONY: all tools build test unit bench fuzz dev vet clean

all: build

## tools: build kube-apiserver, kube-scheduler, kube-controller-manager, kubectl, etcd and kwok once into bin/
tools:
	@hack/build-tools.sh

## build: build bin/crucible
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/crucible ./cmd/crucible

## test: every test, unit and end-to-end on real API servers (builds the tools first if missing)
test: tools
	$(GO) vet ./...
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

## unit: the tests that need no tool binaries
unit:
	$(GO) test -count=1 -short ./...

## bench: every benchmark, each bounded in time and count (under 30 minutes on 2 cores), reported as
##        ratios against baselines measured in the same run in bench/results.md and bench/results.json;
##        BENCH=webhook (or a comma-separated list; see `go run ./hack/benchreport -list`) runs only those,
##        replacing their rows; BENCH_NOTE is a line for the report's header (say, how loaded the machine was)
BENCH      ?=
BENCH_NOTE ?=
bench: tools
	$(GO) run ./hack/benchreport -bench '$(BENCH)' -note '$(BENCH_NOTE)'

## dev: start a local hub and spoke in the foreground, run a sample turn through it; Ctrl-C stops it
dev: tools build
	$(BIN)/crucible dev up --sample

clean:
	rm -rf $(BIN)/crucible .dev
