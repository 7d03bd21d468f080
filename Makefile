# sandgate — make run starts a development gateway; make test runs every test.
GO        ?= go
BIN       := bin/sandgate
PKGS      := ./...
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X github.com/sandgate/sandgate.Version=$(VERSION)
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
E2E_SHARDS  ?= 3

export CGO_ENABLED ?= 1

.PHONY: all build run test coverage docs-test test-cluster cluster-drills lint bench bench-scale soak bundle test-bundle gateway-image check-compose image language-images check-deps bootstrap clean console-screenshots

all: build

bootstrap:
	@bash deploy/bootstrap.sh

# The binary is linked statically: it is also the sandboxes' agent
# (docs/sessions.md), mounted into images that have no C library.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/sandgate

image: build bootstrap
	@./$(BIN) image build

# The language images (deploy/images/*.yaml) from Debian packages with
# mmdebstrap, which needs the Debian mirror; --reuse keeps an image built
# from the same recipe (a cold build of python and node took about 10 s on a
# quiet machine; node-lts, the image "node" names, about 22 s on a loaded
# one). The toolchain image is left out: its cold build (266 MiB, perl
# with git) took 52-76 s, so the tests that need it build it once per test
# binary (executortest.RequireRecipeImage).
LANGUAGE_IMAGES := python node node-lts
language-images: build bootstrap
	@for i in $(LANGUAGE_IMAGES); do ./$(BIN) image build --reuse $$i || exit 1; done

# make run: services up, sandbox image built, migrations applied, gateway on
# 127.0.0.1:8080 with a development token printed.
run: bootstrap build image
	SANDGATE_DEV=1 ./$(BIN) serve

# make test: every unit and integration test, race detector on (the
# end-to-end tests after the rest, in E2E_SHARDS processes at once:
# deploy/test-e2e.sh), against the
# real Docker daemon and PostgreSQL that bootstrap starts, with the sandbox
# and language images built (the tests would build missing language images
# themselves, once per test binary); then, as root,
# the air-gapped bundle built, installed and run in a namespace with no
# network (deploy/test-bundle.sh, about 30 s).
test: bootstrap image language-images
	pkgs=$$($(GO) list $(PKGS)) && pkgs=$$(echo "$$pkgs" | grep -v '/cmd/sandgate/e2e$$') && \
	$(GO) test -race -p 2 -count=1 -timeout 20m $$pkgs
	@GO=$(GO) bash deploy/test-e2e.sh $(E2E_SHARDS)
	@if [ "$$(id -u)" = 0 ]; then bash deploy/test-bundle.sh; \
	elif [ "$$CI" = true ]; then echo "make test: the bundle test needs root (CI=true)"; exit 1; \
	else echo "make test: skipping deploy/test-bundle.sh (needs root: sudo make test-bundle)"; fi
	@if [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory cluster-drills CLUSTER_SHORT=1; \
	elif [ "$$CI" = true ]; then echo "make test: the cluster drills need root (CI=true)"; exit 1; \
	else echo "make test: skipping the cluster drills (need root: sudo make test-cluster)"; fi

# make coverage: statement coverage per package, every test run once more
# without the race detector, each test binary instrumenting every package
# (-coverpkg), so that a package's figure counts what any test reached,
# the end-to-end tests' included; deploy/coverage prints it per package
# against the goal of 80 % (reported, not enforced). It is not part of
# make test: -coverpkg over the module made the race-enabled tests of
# admission 12 and 27 % slower (runstore +32 and -11 %, on a loaded
# machine), and the e2e package is already near CI's 20-minute bound. .ci/run runs it with
# SANDGATE_CI_COVERAGE=1.
COVER_OUT := bin/cover.out
coverage: bootstrap image language-images
	@mkdir -p $(dir $(COVER_OUT))
	$(GO) test -p 2 -count=1 -timeout 20m -coverpkg=./... -coverprofile=$(COVER_OUT) $(PKGS)
	$(GO) run ./deploy/coverage -profile $(COVER_OUT) -goal 80

# make docs-test: every shell example of README.md and docs/ marked
# <!-- docs-test: run --> runs against a real gateway (bash -e, in a fresh
# directory with the fixtures the docs name); a block marked neither run
# nor skip with a reason fails too. make test runs it with the rest.
docs-test: bootstrap image language-images
	$(GO) test -count=1 -run '^(TestDocsMarkers|TestDocsExamples)$$' -v -timeout 20m ./cmd/sandgate/e2e

# make test-cluster: the cluster drills on this machine (deploy/cluster.sh:
# a second Docker daemon, a Postgres 15 primary with a synchronous streaming
# replica; needs root). Two gateways under load: the primary is killed and
# the replica promoted, then one node's Docker daemon is stopped. Each
# drill logs its counts. make test runs the short form (CLUSTER_SHORT=1,
# about 50 s). SANDGATE_CLUSTER_KEEP=1 leaves the cluster up afterwards
# (deploy/cluster.sh down removes it).
test-cluster: bootstrap image
	@$(MAKE) --no-print-directory cluster-drills

cluster-drills:
	@log=$$(mktemp /tmp/sandgate-cluster.XXXXXX.log); \
	SANDGATE_CLUSTER_SHORT=$(CLUSTER_SHORT) $(GO) test -tags cluster -run '^TestClusterDrills$$' -count=1 -timeout 15m -v ./cmd/sandgate/e2e >$$log 2>&1; rc=$$?; \
	grep -E '^ *(--- |PASS|FAIL|ok )|drills_test.go' $$log | cut -c1-400; \
	if [ $$rc = 0 ]; then rm -f $$log; else echo "make: the cluster drills failed; full log (with each gateway's): $$log"; fi; exit $$rc

# make lint: go vet and staticcheck over every package, the cluster drills
# and the soak test (build tags cluster and soak) included.
LINT_TAGS := cluster,soak
lint:
	$(GO) vet -tags $(LINT_TAGS) $(PKGS)
	$(GO) run $(STATICCHECK) -tags $(LINT_TAGS) $(PKGS)

check-deps:
	$(GO) test -count=1 -run 'TestPackageBoundaries|TestVerificationLinksNoDatabase' .

# make bench: every Go benchmark once (each sizes its own sample: medians,
# percentiles and ratios against `docker run --rm` are reported as metrics);
# the scale benchmarks (BenchmarkScale*) at their smallest sizes only.
bench: bootstrap image
	@command -v wrk >/dev/null || { echo "installing wrk"; apt-get install -y -qq wrk >/dev/null; }
	$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 -timeout 60m $(PKGS)

# make bench-scale: the scale benchmarks (their short form is part of make
# bench) at every size: the run store at 10k/100k/1M runs, the audit trail
# at 100k/1M/10M events, 10/100/500 idle sessions, 100/1k/10k live
# followers, a submission's database work at 1/16/64 at once. Their output
# goes to docs/benchmarks/scale.txt and deploy/benchplot draws the curves
# from it (docs/benchmarks/*.svg, shown in docs/benchmarks.md). One
# package at a time, so that they do not load each other. The 10M-event
# trail needs about 15 GB of disk while it runs.
SCALE_OUT := docs/benchmarks/scale.txt
bench-scale: SHELL := /bin/bash
bench-scale: bootstrap image
	@mkdir -p $(dir $(SCALE_OUT))
	@command -v wrk >/dev/null || { echo "installing wrk"; apt-get install -y -qq wrk >/dev/null; }
	set -o pipefail; SANDGATE_BENCH_SCALE=full $(GO) test -p 1 -run '^$$' -bench 'BenchmarkScale' -benchtime 1x -count 1 -timeout 300m \
		./runstore ./audit ./cmd/sandgate/e2e | tee $(SCALE_OUT)
	$(GO) run ./deploy/benchplot -in $(SCALE_OUT) -out $(dir $(SCALE_OUT))

# make soak: ten minutes of mixed runs at 8 concurrent, sampling the
# gateway's RSS and goroutines (not part of make test).
soak: bootstrap image
	$(GO) test -tags soak -run TestSoak -count 1 -timeout 30m -v ./cmd/sandgate/e2e

# make bundle: the air-gapped install tarball in dist/.
bundle: bootstrap
	bash deploy/bundle.sh

# make test-bundle: install the bundle and run a job inside a network
# namespace that has only lo.
test-bundle: bundle
	bash deploy/test-bundle.sh dist/sandgate-$(VERSION)-linux-amd64.tar.gz

# The gateway as a FROM scratch image, and a static check of the compose file.
gateway-image:
	bash deploy/compose/build-image.sh --tag sandgate/gateway:$(VERSION)

check-compose:
	bash deploy/compose/check-compose.sh

# make console-screenshots: the console's browser tests, writing their
# screenshots of each page into docs/console/ (docs/console.md shows them).
console-screenshots: bootstrap image
	SANDGATE_CONSOLE_SCREENSHOTS=$(CURDIR)/docs/console $(GO) test -count=1 -run 'TestConsole' -timeout 10m ./cmd/sandgate/e2e

clean:
	rm -rf bin
