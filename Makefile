# Cairn: durable multi-step jobs on NATS JetStream.
GO ?= go
NATS_CLI_VERSION = v0.5.0

.PHONY: build demo test test-short vet e2e-full bench nats-cli contract clean

build:
	$(GO) build -o bin/cairn ./cmd/cairn
	$(GO) build -o bin/ ./services/...

# The reference night with a real crash at entry 24 of post-ledger, resumed, on the embedded default.
demo: build
	./bin/cairn demo

# Unit and end-to-end tests, under the race detector.
test: vet
	$(GO) test -race -count=1 -timeout 14m ./...

test-short:
	$(GO) test -short ./...

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l cmd internal pkg services e2e)" || { echo "gofmt needed:"; gofmt -l cmd internal pkg services e2e; exit 1; }

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/...

nats-cli:
	command -v nats >/dev/null || $(GO) install github.com/nats-io/natscli/nats@$(NATS_CLI_VERSION)

# The contracts, checked from the outside with the real NATS CLI and sqlite3.
contract: nats-cli
	PATH="$$PATH:$$($(GO) env GOPATH)/bin" ../shared/acceptance/contract-check.sh

clean:
	rm -rf bin .cairn
