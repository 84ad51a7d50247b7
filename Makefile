# fanout — see README.md. `make demo` and `make test` do all setup themselves.
GO          ?= go
BIN         ?= bin
STATICCHECK ?= $(shell $(GO) env GOPATH)/bin/staticcheck
STATICCHECK_VERSION ?= v0.8.2
E2E_TIMEOUT ?= 75m

.PHONY: all build test unit e2e lint bench demo clean tools

all: build

build:
	$(GO) build -o $(BIN)/fanout ./cmd/fanout

## test: unit tests, then the e2e suite against a real control plane.
test: unit e2e

unit:
	$(GO) test -race -count=1 ./...

## e2e: builds (and caches) kube-apiserver, kube-controller-manager,
## kube-scheduler and kubectl from k8s.io/kubernetes, then runs the suite.
e2e:
	cd e2e && $(GO) test -count=1 -timeout $(E2E_TIMEOUT) -v ./...

$(STATICCHECK):
	$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

tools: $(STATICCHECK)

lint: $(STATICCHECK)
	@out=$$(gofmt -l . ); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd e2e && $(GO) vet ./...
	$(STATICCHECK) ./...

## bench: not part of `make test`. Installs HAProxy when missing, builds
## fanout and e2e/cmd/bench, which runs the micro benchmarks (with a CPU
## profile), then fanout vs direct vs HAProxy, and writes docs/benchmarks.md.
## `make bench BENCH_ARGS=-quick` is a short smoke run, labelled as such.
BENCH_ARGS ?=
bench: build
	@command -v haproxy >/dev/null || apt-get install -y haproxy || { apt-get update && apt-get install -y haproxy; }
	@command -v perf >/dev/null || apt-get install -y linux-perf || echo "bench: no perf: the report will have no profiles of the proxy processes"
	cd e2e && $(GO) build -o $(abspath $(BIN))/fanout-bench ./cmd/bench
	cd e2e && FANOUT_BENCH_VIA="make bench BENCH_ARGS='$(BENCH_ARGS)'" $(abspath $(BIN))/fanout-bench -fanout $(abspath $(BIN))/fanout $(BENCH_ARGS)

demo:
	cd e2e && $(GO) run ./cmd/demo $(ARGS)

clean:
	rm -rf $(BIN)
