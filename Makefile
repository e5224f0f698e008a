# Cairn: durable multi-step jobs on NATS JetStream.
GO ?= go
NATS_CLI_VERSION = v0.5.0

.PHONY: build demo demo-enrich test test-short vet fuzz e2e-full bench nats-cli contract deploy-check clean

# The code version every step records (versions.code): the release tag, else 12 hex digits of
# the commit, "+dirty" with uncommitted changes (the same form runtime/debug gives a build that
# stamps its VCS revision, which a git worktree or GOFLAGS=-buildvcs=false does not).
VERSION ?= $(shell v=$$(git describe --tags --exact-match 2>/dev/null || git rev-parse --short=12 HEAD 2>/dev/null) && { git diff --quiet HEAD 2>/dev/null || v="$$v+dirty"; } && echo "$$v")
LDFLAGS = -X github.com/cairnhq/cairn/internal/service.version=$(VERSION)

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/cairn ./cmd/cairn
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./services/...

# The reference night with a real crash at entry 24 of post-ledger, resumed, on the embedded default.
demo: build
	./bin/cairn demo

# The second job, built on the public API alone (examples/enrich): the enrichment API times out
# at record 7 and the job is killed after upload 40, on Cairn and as a plain
# restart-from-step-one script, side by side.
demo-enrich:
	$(GO) build -o bin/enrich ./examples/enrich/cmd/enrich
	./bin/enrich demo

# Unit and end-to-end tests, under the race detector. The e2e package is the long pole: it
# builds the cairn binary once plain and once with -race, then runs its tests in parallel, three
# nights at a time beside the tests that mostly wait (e2e/harness_test.go, TestMain). Its child
# processes run the plain build but for a few nights (raceChild) that run the race build; the
# test process and every package's tests stay under -race. Measured on 2 shared cores:
# `go test -race -count=1 ./e2e` went from 766 s of CPU (user+sys), 685 s wall, with every
# child race-built, to 402 s CPU, 392 s wall; the whole `go test -race -count=1 ./...` from
# 1288 s CPU, 17m17s wall, to 778 s CPU, 8m38s wall.
test: vet
	$(GO) test -race -count=1 -timeout 25m ./...
	$(MAKE) fuzz

# Go native fuzzing, FUZZTIME per target: no decodable record nor command panics the
# supervisor's commands and sweeps, the runner's step protocol, or a record's readers. A
# plain go test runs the seed corpora; this mutates them. New coverage is not minimised
# (-fuzzminimizetime=1x): the embedded nats-server's own coverage makes most inputs "new".
# A failure leaves its input under the package's testdata/fuzz/ for go test to replay.
FUZZTIME ?= 10s
FUZZ_TARGETS = ./pkg/supervisor:FuzzSupervisor ./pkg/runner:FuzzRunnerProtocol ./pkg/kvcheckpoint:FuzzCheck ./pkg/httpidem:FuzzParseKey ./pkg/httpidem:FuzzParseFence
# Go's fuzzing coordinator can fail a target with a bare "context deadline exceeded" when
# -fuzztime ends while a worker is mid-call (golang/go#75804, fixed in go1.27): such a failure,
# with no failing input written, is run once again; any other failure, or a second one, fails.
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg="$${t%%:*}"; name="$${t##*:}"; corpus="$$pkg/testdata/fuzz/$$name"; \
		for try in 1 2; do \
			echo "fuzz $$name ($(FUZZTIME))"; \
			before=$$(ls "$$corpus" 2>/dev/null | wc -l); \
			out=$$($(GO) test -count=1 -run '^$$' -fuzz "^$$name$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=1x -parallel 2 "$$pkg" 2>&1); rc=$$?; \
			echo "$$out" | grep -v '^fuzz: elapsed'; \
			[ $$rc -eq 0 ] && break; \
			after=$$(ls "$$corpus" 2>/dev/null | wc -l); \
			if [ $$try -eq 1 ] && [ "$$before" = "$$after" ] && echo "$$out" | grep -q '^    context deadline exceeded$$'; then \
				echo "fuzz $$name: the coordinator's end-of-time race (no failing input written): once again"; continue; \
			fi; \
			exit 1; \
		done; \
	done

# The full crash matrix: every boundary and every write of every writing step (about 30 minutes).
e2e-full:
	CAIRN_E2E_FULL=1 $(GO) test -race -count=1 -timeout 120m -run TestCrashMatrixFull ./e2e

test-short:
	$(GO) test -short ./...

vet:
	$(GO) vet ./...
	@$(GO) mod tidy -diff || { echo "go.mod or go.sum is not tidy: run go mod tidy"; exit 1; }
	@test -z "$$(gofmt -l cmd internal pkg services e2e examples)" || { echo "gofmt needed:"; gofmt -l cmd internal pkg services e2e examples; exit 1; }

# Issue 8's measurements at WORKLOAD.md's sizes, on a build without -race, the big night
# (100,000 invoices) and the 1,000 many nights included: the figures and the README's table
# go to bench/results/ (latest.json, latest.md), the hot paths' testing.B benchmarks to
# bench/results/micro.txt. BENCH_MANY_RUNS=50 BENCH_BIG=false make a quicker round.
# cairn dev runs as it would in a container limited to 512 MiB: with the Go runtime's soft
# memory limit below it (its GOMEMLIMIT, as deploy/k8s sets for every service).
BENCH_MANY_RUNS ?= 1000
BENCH_BIG ?= true
BENCH_GOMEMLIMIT ?= 448MiB
bench:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/cairn ./cmd/cairn
	CAIRN_BENCH_DEV_GOMEMLIMIT=$(BENCH_GOMEMLIMIT) ./bin/cairn bench all --many-runs $(BENCH_MANY_RUNS) --big=$(BENCH_BIG) --out bench/results/latest.json --markdown bench/results/latest.md
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/kvcheckpoint ./pkg/events ./pkg/runner ./pkg/ratelimit | tee bench/results/micro.txt

nats-cli:
	command -v nats >/dev/null || $(GO) install github.com/nats-io/natscli/nats@$(NATS_CLI_VERSION)

# The contracts, checked from the outside with the real NATS CLI and sqlite3.
contract: nats-cli
	PATH="$$PATH:$$($(GO) env GOPATH)/bin" ../shared/acceptance/contract-check.sh

# deploy/: the NATS configurations through the real server's configuration test (a
# nats-server built from the module in go.mod), then the compose file and the Kubernetes
# manifests through a YAML parser (python3-yaml) and deploy/check.py.
deploy-check:
	$(GO) build -o bin/nats-server github.com/nats-io/nats-server/v2
	cd deploy/nats && ../../bin/nats-server -t -c single.conf
	cd deploy/nats && NATS_SERVER_NAME=nats-1 NATS_ROUTES='[nats://nats-1:6222, nats://nats-2:6222, nats://nats-3:6222]' ../../bin/nats-server -t -c cluster.conf
	python3 deploy/check.py

clean:
	rm -rf bin .cairn
