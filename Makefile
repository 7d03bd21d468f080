# sandgate — make run starts a development gateway; make test runs every test.
GO        ?= go
BIN       := bin/sandgate
PKGS      := ./...
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X github.com/sandgate/sandgate.Version=$(VERSION)
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

export CGO_ENABLED ?= 1

.PHONY: all build run test test-cluster cluster-drills lint bench soak bundle test-bundle gateway-image check-compose image language-images check-deps bootstrap clean console-screenshots

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
# from the same recipe (a cold build of both takes about 10 s here).
LANGUAGE_IMAGES := python node
language-images: build bootstrap
	@for i in $(LANGUAGE_IMAGES); do ./$(BIN) image build --reuse $$i || exit 1; done

# make run: services up, sandbox image built, migrations applied, gateway on
# 127.0.0.1:8080 with a development token printed.
run: bootstrap build image
	SANDGATE_DEV=1 ./$(BIN) serve

# make test: every unit and integration test, race detector on, against the
# real Docker daemon and PostgreSQL that bootstrap starts, with the sandbox
# and language images built (the tests would build missing language images
# themselves, once per test binary); then, as root,
# the air-gapped bundle built, installed and run in a namespace with no
# network (deploy/test-bundle.sh, about 30 s).
test: bootstrap image language-images
	$(GO) test -race -p 2 -count=1 -timeout 20m $(PKGS)
	@if [ "$$(id -u)" = 0 ]; then bash deploy/test-bundle.sh; \
	elif [ "$$CI" = true ]; then echo "make test: the bundle test needs root (CI=true)"; exit 1; \
	else echo "make test: skipping deploy/test-bundle.sh (needs root: sudo make test-bundle)"; fi
	@if [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory cluster-drills CLUSTER_SHORT=1; \
	elif [ "$$CI" = true ]; then echo "make test: the cluster drills need root (CI=true)"; exit 1; \
	else echo "make test: skipping the cluster drills (need root: sudo make test-cluster)"; fi

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
# percentiles and ratios against `docker run --rm` are reported as metrics).
bench: bootstrap image
	@command -v wrk >/dev/null || { echo "installing wrk"; apt-get install -y -qq wrk >/dev/null; }
	$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 -timeout 60m $(PKGS)

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
