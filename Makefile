# fanout — see README.md. `make demo` and `make test` do all setup themselves.

# Every module's go.mod requires Go 1.27.3, the first release here without
# known vulnerabilities reachable from fanout (make vulncheck). The go command
# fetches it from the module proxy once; Debian's and go.dev's Go default to
# GOTOOLCHAIN=local, which would refuse the go.mod line instead.
ifeq ($(filter go1.%,$(GOTOOLCHAIN)),)
export GOTOOLCHAIN := go1.27.3
endif
GO          ?= go
BIN         ?= bin
STATICCHECK ?= $(shell $(GO) env GOPATH)/bin/staticcheck
STATICCHECK_VERSION ?= v0.8.2
E2E_TIMEOUT ?= 75m

## VERSION and COMMIT are stamped into the binaries (fanout version,
## fanout-injector --version, fanout_build_info): git describe of the
## checkout (a tag once there is one, else the short commit; -dirty with
## uncommitted changes), and its full commit.
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null)
COMMIT      ?= $(shell git rev-parse HEAD 2>/dev/null)
VERSION_PKG := github.com/fanout-dev/fanout/internal/version
LDFLAGS     := -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).commit=$(COMMIT)

.PHONY: all build release release-check release-binaries test unit e2e e2e-binaries conformance upgrade soak lint bench demo clean tools fuzz fuzz-long image image-binaries vulncheck

all: build

build:
	$(GO) build -ldflags='$(LDFLAGS)' -o $(BIN)/fanout ./cmd/fanout
	$(GO) build -ldflags='$(LDFLAGS)' -o $(BIN)/fanout-injector ./cmd/fanout-injector
	$(GO) build -ldflags='$(LDFLAGS)' -o $(BIN)/kubectl-fanout ./cmd/kubectl-fanout

## release VERSION=vX.Y.Z: hack/release-check.sh first (semantic version,
## CHANGELOG.md's newest section, the manifests' image tag, and the git tag
## VERSION at HEAD in a clean tree unless RELEASE_CHECK_TAG=0), then
## $(RELEASE_DIR): static fanout and fanout-injector for linux and each of
## RELEASE_ARCHES, the image tarball ghcr.io/fanout-dev/fanout:VERSION for
## IMAGE_ARCH (RELEASE_IMAGE=0 skips it) and SHA256SUMS, all stamped with
## VERSION. See docs/releasing.md.
RELEASE_ARCHES ?= amd64 arm64
RELEASE_IMAGE ?= 1
RELEASE_CHECK_TAG ?= 1
RELEASE_DIR = $(BIN)/release/$(VERSION)
release: release-check release-binaries
ifneq ($(RELEASE_IMAGE),0)
	$(MAKE) image VERSION=$(VERSION) COMMIT=$(COMMIT) BIN=$(RELEASE_DIR)/build IMAGE_REF=ghcr.io/fanout-dev/fanout:$(VERSION) IMAGE_TAR=$(abspath $(RELEASE_DIR))/fanout-image-linux-$(IMAGE_ARCH).tar
	rm -rf $(RELEASE_DIR)/build
endif
	cd $(RELEASE_DIR) && sha256sum fanout-* > SHA256SUMS
	@echo "release: $(VERSION) in $(RELEASE_DIR)"

release-check:
	RELEASE_CHECK_TAG=$(RELEASE_CHECK_TAG) ./hack/release-check.sh '$(VERSION)'

release-binaries: release-check
	@set -e; for arch in $(RELEASE_ARCHES); do for cmd in fanout fanout-injector; do \
	  echo "release: $(RELEASE_DIR)/$$cmd-linux-$$arch"; \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags='-s -w $(LDFLAGS)' -o $(RELEASE_DIR)/$$cmd-linux-$$arch ./cmd/$$cmd; \
	done; done

## image: builds $(IMAGE_TAR), an OCI image layout tarball holding static
## /fanout and /fanout-injector (user 65532, entrypoint /fanout), offline
## with go-containerregistry (hack/image), then reads it back and checks it.
## Load it with e.g. `skopeo copy oci-archive:$(IMAGE_TAR) docker-daemon:$(IMAGE_REF)`.
IMAGE_TAR ?= $(BIN)/fanout-image.tar
IMAGE_REF ?= ghcr.io/fanout-dev/fanout:dev
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)
image-binaries:
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath -ldflags='-s -w $(LDFLAGS)' -o $(BIN)/image/fanout ./cmd/fanout
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath -ldflags='-s -w $(LDFLAGS)' -o $(BIN)/image/fanout-injector ./cmd/fanout-injector

image: image-binaries
	cd hack/image && $(GO) run . build -o $(abspath $(IMAGE_TAR)) -tag $(IMAGE_REF) -arch $(IMAGE_ARCH) $(abspath $(BIN)/image/fanout) $(abspath $(BIN)/image/fanout-injector)
	cd hack/image && $(GO) run . check $(abspath $(IMAGE_TAR))

## test: unit tests, the image build and check, then the e2e suite against a real control plane.
test: unit image e2e

unit:
	$(GO) test -race -count=1 ./...
	@# The race detector changes allocations: the tests that count them
	@# skip under it, and run here without it.
	$(GO) test -count=1 -run '^TestShortRequestAllocations' ./components/proxy/

## e2e-binaries: builds (and caches) the Kubernetes binaries the harness
## runs (harness.Binaries: kube-apiserver, kube-controller-manager,
## kube-scheduler, kubectl, kubelet and kube-proxy), printing progress as it
## goes; the first build takes about 11 to 12 minutes on a quiet two-core
## machine (docs/measured.md). Then helm for the chart tests
## (harness.Helm: go install helm.sh/helm/v4/cmd/helm@HelmVersion into the
## same cache; docs/development.md).
e2e-binaries:
	@echo "e2e-binaries: compiling the harness, then building or finding the Kubernetes binaries and helm"
	cd e2e && $(GO) run ./cmd/kubebins

## conformance: upstream's API-only [Conformance] specs (e2e.test of the
## e2e module's Kubernetes version, built into the same cache: up to 10
## minutes the first time) run directly and through fanout, and the pass
## sets compared (TestConformanceThroughFanout, about 9 minutes). A sibling
## of make test, outside .ci/run for its time budget: docs/security.md.
conformance: e2e-packages
	@echo "conformance: building or finding the Kubernetes binaries and e2e.test"
	cd e2e && $(GO) run ./cmd/kubebins -conformance
	cd e2e && FANOUT_CONFORMANCE=1 $(GO) test -count=1 -timeout 50m -v -run '^TestConformanceThroughFanout$$' .

## upgrade: a real upgrade (TestUpgradeRoll, docs/resilience.md, Upgrade
## roll): three apiservers of UPGRADE_FROM under that release's
## kube-controller-manager and kube-scheduler rolled one by one to the e2e
## module's release, with clients through fanout, an L4 proxy and direct;
## 0 failed requests and 0 404s through fanout. Builds UPGRADE_FROM's
## kube-apiserver, kube-controller-manager and kube-scheduler into the cache
## first, with progress (about as long as the first e2e-binaries build).
## A sibling of make test, like conformance.
UPGRADE_FROM ?= v1.36.3
upgrade: e2e-packages
	@echo "upgrade: building or finding the Kubernetes binaries and those of $(UPGRADE_FROM)"
	cd e2e && $(GO) run ./cmd/kubebins -release $(UPGRADE_FROM)
	cd e2e && FANOUT_UPGRADE_FROM=$(UPGRADE_FROM) $(GO) test -count=1 -timeout 45m -v -run '^TestUpgradeRoll$$' .

## soak: the chaos soak of docs/resilience.md (Soak) on the real node,
## for SOAK_DURATION (default 30m; make test runs it for 3m as part of the
## e2e suite): the in-pod controllers, writers, readers and 50 informers
## through fanout, the same informers through an L4 balancer, and a fault
## a minute drawn by SOAK_SEED. The report (soak.json, soak.svg) goes to
## SOAK_OUT (default: a new temporary directory, printed).
SOAK_DURATION ?= 30m
SOAK_SEED ?= 1
SOAK_OUT ?=
SOAK_TIMEOUT ?= 90m
soak: e2e-packages e2e-binaries
	cd e2e && FANOUT_SOAK_DURATION=$(SOAK_DURATION) FANOUT_SOAK_SEED=$(SOAK_SEED) FANOUT_SOAK_OUT=$(SOAK_OUT) $(GO) test -count=1 -timeout $(SOAK_TIMEOUT) -v -run '^TestSoak$$' .

## e2e: the Kubernetes binaries first, then the suite. -p 1 makes go test
## print each test's output as it comes instead of holding a package's
## output back until the package ends (it does that whenever several
## packages may run at once), so a long run is never silent.
## The TestNode* tests run a real node: see e2e/README.md.
e2e: e2e-packages e2e-binaries
	cd e2e && $(GO) test -p 1 -count=1 -timeout $(E2E_TIMEOUT) -v ./...

## e2e-packages: installs what the harness runs from Debian when missing:
## iproute2 (network namespaces), and containerd, runc, the CNI plugins and
## iptables for the real node (e2e/harness/node.go).
e2e-packages:
	@set -e; pkgs=""; \
	command -v ip >/dev/null || pkgs="$$pkgs iproute2"; \
	command -v containerd >/dev/null || pkgs="$$pkgs containerd"; \
	command -v runc >/dev/null || pkgs="$$pkgs runc"; \
	[ -x /usr/lib/cni/bridge ] || pkgs="$$pkgs containernetworking-plugins"; \
	command -v iptables >/dev/null || pkgs="$$pkgs iptables"; \
	if [ -n "$$pkgs" ]; then \
	  echo "e2e-packages: installing$$pkgs"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq $$pkgs; \
	fi

$(STATICCHECK):
	$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

tools: $(STATICCHECK)

lint: $(STATICCHECK)
	@out=$$(gofmt -l . ); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd e2e && $(GO) vet ./...
	cd hack/image && $(GO) vet ./...
	cd examples/controller-runtime && $(GO) vet ./...
	$(STATICCHECK) ./...

## fuzz: runs every go test -fuzz target of the main module for FUZZTIME
## each (the seed corpora in testdata/fuzz also run in `make unit`).
FUZZTIME ?= 10s
fuzz:
	@set -e; grep -rl --include='*_test.go' '^func Fuzz' . | grep -v -e '^./e2e/' -e '^./hack/' | sort | while read -r f; do \
	  dir=$$(dirname "$$f"); \
	  for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$$f"); do \
	    echo "fuzzing $$t in $$dir for $(FUZZTIME)"; \
	    $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) "./$$dir" || exit 1; \
	  done; \
	done

## fuzz-long: runs the fuzz targets of internal/h1server (the differential
## one against net/http's server among them) for FUZZLONG each: 10^7
## executions by default, or a duration (FUZZLONG=30m). Prints the executions
## go reports; a failing input is kept in testdata/fuzz. Not for CI.
FUZZLONG ?= 10000000x
fuzz-long:
	@set -e; log=$$(mktemp); trap 'rm -f "$$log" "$$log.rc"' EXIT; \
	for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' internal/h1server/*_test.go); do \
	  echo "fuzzing $$t in ./internal/h1server for $(FUZZLONG)"; \
	  { $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZLONG) ./internal/h1server 2>&1 && echo 0 >"$$log.rc" || echo 1 >"$$log.rc"; } | tee "$$log"; \
	  echo "$$t: $$(sed -n 's/^fuzz: elapsed: \([^,]*\), execs: \([0-9]*\) .*/\2 executions in \1/p' "$$log" | tail -1)"; \
	  [ "$$(cat "$$log.rc")" = 0 ] || exit 1; \
	done

## vulncheck: govulncheck against the Go vulnerability database taken
## offline from the golang.org/x/vulndb module (indexed once into the cache).
## hack/vulnfilter fails the run when fanout calls a vulnerable function,
## of a dependency or of the standard library (the Go release that fixes it
## is listed); VULNFILTER_ARGS=-allow-stdlib lists standard-library findings
## without failing.
GOVULNCHECK_VERSION ?= v1.9.0
VULNDB_VERSION ?= v0.0.0-20261105234957-e22db6528018
VULNFILTER_ARGS ?=
vulncheck:
	$(GO) install golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION)
	@set -e; out="$${XDG_CACHE_HOME:-$$HOME/.cache}/fanout-vulndb/$(VULNDB_VERSION)"; \
	if [ ! -f "$$out/index/db.json" ]; then \
	  src=$$(cd /tmp && $(GO) mod download -json golang.org/x/vulndb@$(VULNDB_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	  echo "indexing $$src/data/osv into $$out"; \
	  (cd /tmp && $(GO) run golang.org/x/vulndb/cmd/indexdb@$(VULNDB_VERSION) -vulns "$$src/data/osv" -out "$$out"); \
	fi; \
	mkdir -p $(BIN); \
	"$$($(GO) env GOPATH)/bin/govulncheck" -db "file://$$out" -format json ./... > $(BIN)/vulncheck.json; \
	$(GO) run ./hack/vulnfilter $(VULNFILTER_ARGS) < $(BIN)/vulncheck.json

## bench: not part of `make test`. Installs HAProxy when missing, builds
## fanout and e2e/cmd/bench, which runs the micro benchmarks (with a CPU
## profile), then fanout vs direct vs HAProxy vs the library (package client
## in the load generator) vs fanout --listen-tls (-targets picks some), the
## memory one open watch costs fanout and the library (footprint section),
## and writes docs/benchmarks.md, with the footprint's heap and goroutine
## profiles and the proxies' perf reports in docs/profiles/bench/.
## `make bench BENCH_ARGS=-quick` is a short smoke run, labelled as such.
## The costbalance section (each real apiserver's CPU under cheap GETs plus
## big LISTs, through fanout, HAProxy leastconn/roundrobin and direct) is
## not in the default run: BENCH_ARGS='-sections costbalance -out FILE'.
BENCH_ARGS ?=
bench: build
	@command -v haproxy >/dev/null || apt-get install -y haproxy || { apt-get update && apt-get install -y haproxy; }
	@command -v perf >/dev/null || apt-get install -y linux-perf || echo "bench: no perf: the report will have no profiles of the proxy processes"
	cd e2e && $(GO) build -o $(abspath $(BIN))/fanout-bench ./cmd/bench
	cd e2e && FANOUT_BENCH_VIA="make bench BENCH_ARGS='$(BENCH_ARGS)'" $(abspath $(BIN))/fanout-bench -fanout $(abspath $(BIN))/fanout $(BENCH_ARGS)

## demo: keys and flags in README.md and `make demo ARGS=-help`. The demo
## builds or finds the Kubernetes binaries itself, with the same progress
## lines as e2e-binaries, so -help needs no build. `make demo ARGS=-node`
## adds the real node, which needs the node's Debian packages first.
demo: $(if $(filter -node -node=true,$(ARGS)),e2e-packages)
	cd e2e && $(GO) run ./cmd/demo $(ARGS)

clean:
	rm -rf $(BIN)
