# wasmhost: a node agent that registers kubelet-style plugins through WebAssembly handlers.
#
#   make run     build the daemon and the shipped handlers, run it with local dirs under ./run/
#   make test    lint, vet, every test with the race detector, the interop tests (test/interop)
#                and those against a real kube-apiserver (test/kube),
#                then a short fuzz run of every fuzz target
#   make lint    staticcheck, gofmt and go mod tidy for every module
#   make bench   run the benchmarks (figures recorded in docs/benchmarks.md)

GO       ?= go
RUN_DIR  ?= $(CURDIR)/run
BIN      := bin/wasmhost
# VERSION is what `wasmhost version` and `wasmhost status` print: the commit described by git
# (a build with -buildvcs=false, or from a tarball, knows no other).
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# Every directory under handlers-wasm/ is one handler, written in C with the C SDK (abi/c):
# handlers-wasm/<name>/<name>.c, built to handlers-wasm/<name>.wasm, a WASI reactor of a few
# tens of KB (docs/benchmarks-history.md says why C). Debian: clang lld wasi-libc libclang-rt-14-dev-wasm32.
HANDLERS := $(patsubst %/,%.wasm,$(wildcard handlers-wasm/*/))
WASM_CC ?= clang
WASM_CFLAGS ?= --target=wasm32-wasi -mexec-model=reactor -O2 -s
C_SDK := abi/c/wasmhost.c abi/c/wasmhost.h

.PHONY: all build handlers run test test-unit test-interop test-kube test-short lint fuzz bench fmt vet clean image handlers-image example-plugin-image

all: build

build: $(BIN) handlers

$(BIN): FORCE
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $@ ./cmd/wasmhost

handlers: $(HANDLERS)

handlers-wasm/%.wasm: handlers-wasm/%/*.c $(C_SDK)
	$(WASM_CC) $(WASM_CFLAGS) -I abi/c -o $@ handlers-wasm/$*/*.c abi/c/wasmhost.c

# install -m 0644 replaces a handler safely under a running daemon too: its plugins stay
# registered (README: Adding, replacing and removing a handler).
run: build
	install -d -m 0755 $(RUN_DIR)/plugins_registry $(RUN_DIR)/handlers
	install -d -m 0700 $(RUN_DIR)/state
	install -m 0644 $(HANDLERS) $(RUN_DIR)/handlers/
	@echo
	@echo "wasmhost: plugin sockets go in  $(RUN_DIR)/plugins_registry"
	@echo "          handlers (.wasm) go in $(RUN_DIR)/handlers"
	@echo "          try: go run ./examples/plugin --socket-dir $(RUN_DIR)/plugins_registry  (type example.wasmhost.dev)"
	@echo "          see: bin/wasmhost plugins --admin-socket $(RUN_DIR)/state/admin.sock"
	@echo
	$(BIN) run --config examples/config/wasmhost.yaml --socket-dir $(RUN_DIR)/plugins_registry --handler-dir $(RUN_DIR)/handlers --state-dir $(RUN_DIR)/state

# MODULES are the repository's Go modules: the daemon, and the contract with handler authors
# (abi/, standard library only). test/interop has its own target.
MODULES := . abi

vet:
	for m in $(MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done

# test runs everything CI runs: the lint, the daemon's own tests, the interoperability tests with
# real plugins (test/interop, a module of its own so that the kubelet's dependencies stay out of
# the daemon's go.mod; its first build takes a few minutes), then the short fuzz run.
test: lint test-unit test-interop test-kube fuzz

# lint: staticcheck at a pinned version (go run builds it once into the build cache, from the
# module proxy; nothing to install), gofmt, and go.mod/go.sum as go mod tidy would leave them,
# for every module including test/interop.
STATICCHECK_VERSION := v0.8.2
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
LINT_MODULES := $(MODULES) test/interop test/kube

lint:
	@unformatted="$$(gofmt -l $$(git ls-files '*.go'))"; \
	if [ -n "$$unformatted" ]; then echo "gofmt: not formatted (make fmt):"; echo "$$unformatted"; exit 1; fi
	for m in $(LINT_MODULES); do (cd $$m && $(GO) mod tidy -diff) || { echo "$$m: go.mod/go.sum not tidy (go mod tidy)"; exit 1; }; done
	for m in $(LINT_MODULES); do (cd $$m && $(STATICCHECK) ./...) || exit 1; done

# fuzz runs every fuzz target for FUZZTIME inputs (5000x by default, a few seconds each; a
# count, not a duration: see hack/fuzz, which finds the targets).
FUZZTIME ?= 5000x

fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) hack/fuzz

test-unit: handlers vet
	for m in $(MODULES); do (cd $$m && $(GO) test -race -timeout 20m ./...) || exit 1; done

# test-interop builds cosign for its signature tests (hack/cosign, once, cached: about 10 minutes
# on 2 cores the first time), as CI does.
test-interop: handlers
	cosign="$$(GO=$(GO) hack/cosign)" && cd test/interop && WASMHOST_COSIGN="$$cosign" $(GO) test -race -timeout 20m ./...

# test-kube runs the publisher against a real kube-apiserver and etcd (test/kube), which
# hack/kube-servers builds from the module proxy once and caches (8 minutes of CPU the first
# time).
test-kube:
	dir="$$(GO=$(GO) hack/kube-servers)" && cd test/kube && WASMHOST_KUBE_SERVERS="$$dir" $(GO) test -race -timeout 30m ./...

test-short: handlers
	for m in $(MODULES); do (cd $$m && $(GO) test -race -short ./...) || exit 1; done

bench: handlers
	$(GO) test -run '^$$' -bench . -benchmem -timeout 30m ./...

# image builds the daemon's container image into an OCI layout directory, with no container
# engine (hack/image, go-containerregistry): a static binary, running as 65532 unless told
# otherwise. handlers-image puts the shipped handlers in an image of their own, for a Kubernetes
# image volume. Push a layout with crane or skopeo (see examples/kubernetes/daemonset.yaml).
IMAGE_DIR  ?= bin/image
HANDLERS_IMAGE_DIR ?= bin/handlers-image
IMAGE_TAG  ?= dev
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)

image:
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath -ldflags='-s -w -X main.version=$(IMAGE_TAG)' -o bin/linux-$(IMAGE_ARCH)/wasmhost ./cmd/wasmhost
	$(GO) run ./hack/image --binary bin/linux-$(IMAGE_ARCH)/wasmhost --arch $(IMAGE_ARCH) --version $(IMAGE_TAG) --out $(IMAGE_DIR) --tag $(IMAGE_TAG)

handlers-image: handlers
	$(GO) run ./hack/image --handlers $(subst $(eval) ,$(comma),$(HANDLERS)) --arch $(IMAGE_ARCH) --out $(HANDLERS_IMAGE_DIR) --tag $(IMAGE_TAG)

# example-plugin-image: the example plugin (examples/plugin) in an image of the same kind, to
# see a plugin registered on a cluster (README, "Deploying on Kubernetes").
example-plugin-image:
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath -ldflags='-s -w' -o bin/linux-$(IMAGE_ARCH)/example-plugin ./examples/plugin
	$(GO) run ./hack/image --binary bin/linux-$(IMAGE_ARCH)/example-plugin --name example-plugin --arch $(IMAGE_ARCH) --version $(IMAGE_TAG) --out bin/example-plugin-image --tag $(IMAGE_TAG)

comma := ,

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin $(HANDLERS)

FORCE:
