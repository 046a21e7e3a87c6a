# Nodus — the two commands a new user needs are `make run` and `make test`.

GO          ?= go
# go-nvml's headers mark old NVML calls deprecated; we call none of them.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
ARGS        ?=
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# One version for the server's /version, nodusd and the CLI.
LDFLAGS     := -X k8s.io/component-base/version.gitVersion=v0.1.0-$(VERSION) \
               -X main.version=v0.1.0-$(VERSION) \
               -X github.com/nodus-dev/nodus/pkg/cli.Version=v0.1.0-$(VERSION)
FUZZTIME    ?= 3s
FUZZ_PKG    := ./pkg/apis/nodus/validation
FUZZ_TARGETS := FuzzProject FuzzPool FuzzNode FuzzAllocation FuzzReservation FuzzReservedHost FuzzAccessToken FuzzExecution
# What `nodus ssh` writes into ssh_config and known_hosts from a server's values.
FUZZ_CLI_PKG := ./pkg/cli/sshentry

.PHONY: run build test unit fuzz generate verify bench

## run: start nodus-server on embedded etcd (data under ~/.local/share/nodus; ARGS="--data-dir DIR" to change)
run:
	$(GO) run -ldflags "$(LDFLAGS)" ./cmd/nodus-server $(ARGS)

## build: build every command into bin/
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/...

## test: check generated code, formatting and vet, run every test, then fuzz each kind briefly
test: verify unit fuzz

# The integration package alone takes about ten minutes on two cores, go
# test's default limit per package; twenty leaves room on a slower machine.
unit:
	$(GO) test -count=1 -timeout 20m ./...

# hack/fuzz.sh runs a target again once when Go's fuzz coordinator fails it on
# its own deadline race (golang/go#75804) without a failing input.
fuzz:
	@for target in $(FUZZ_TARGETS); do \
		GO="$(GO)" hack/fuzz.sh $(FUZZ_PKG) $$target $(FUZZTIME) || exit 1; \
	done
	GO="$(GO)" hack/fuzz.sh $(FUZZ_CLI_PKG) FuzzMake $(FUZZTIME)

## generate: regenerate deepcopy, defaults, OpenAPI, clientset, listers, informers, apply configurations
generate:
	hack/update-codegen.sh

## verify: fail when generated code is stale, code is not gofmt-ed, or go vet complains
verify:
	hack/verify-codegen.sh
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "not gofmt-ed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

## bench: API vs raw etcd, release latency, heartbeat cost, allocation, lending, agents' watches and Ironic read figures (nodus-server runs as a child process)
bench: build
	bin/nodus-bench -server bin/nodus-server $(ARGS)
