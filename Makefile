# whale — build, test and benchmark.
#
#   make demo    build whale and run its embedded demo on a local bucket
#   make test    install what the tests need, then run every test (CI runs this)
#   make bench   run the benchmarks
#   make lint    gofmt and go vet

SHELL := /bin/bash
GO ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
export PATH := $(dir $(GO)):$(PATH)
TOOLS := $(CURDIR)/.tools
VERSITYGW := $(TOOLS)/versitygw
VERSITYGW_VERSION := v1.8.0
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
LDFLAGS := -X github.com/whalerun/whale/internal/buildinfo.version=$(VERSION)
DEMO_DIR ?= $(CURDIR)/demo-bucket
# go test's own summary is what CI reads; -count=1 defeats the cache so a
# green run always means the tests ran.
TEST_FLAGS ?= -count=1 -timeout 25m
BENCH ?= .

export WHALE_VERSITYGW := $(VERSITYGW)

.PHONY: all build test test-short bench lint demo tools torch slurm chromium bubblewrap shellcheck deps clean

all: build

deps:
	$(GO) mod download

build: deps
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/whale ./cmd/whale

# versitygw is the S3-compatible server the integration tests run against;
# it is built from the Go module proxy (see ../shared/reference/TESTBED.md).
tools: $(VERSITYGW) torch slurm chromium bubblewrap shellcheck

# A real single-node Slurm (Debian's slurm-wlm and munge) for the
# scale-out tests; internal/slurmtest starts and stops it. Needs root.
slurm:
	@if command -v slurmctld >/dev/null 2>&1 || test -x /usr/sbin/slurmctld; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		echo "installing slurm-wlm and munge for the Slurm tests"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >/dev/null || \
		{ DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >/dev/null; }; \
	else echo "slurm-wlm is missing and this is not root: the Slurm tests will skip (and fail under CI=true)"; fi

# Debian's chromium renders `whale report` pages to a screenshot in the
# report tests (headless, no network). Needs root.
chromium:
	@if command -v chromium >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		echo "installing chromium for the report rendering test"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null || \
		{ DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; }; \
	else echo "chromium is missing and this is not root: the report rendering test will skip (and fail under CI=true)"; fi

# Debian's bubblewrap (bwrap) sandboxes the model-written Python of the
# math domain's local code interpreter (domains/math); without it that
# runner refuses to run code. Needs root.
bubblewrap:
	@if command -v bwrap >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		echo "installing bubblewrap for the local Python sandbox"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap >/dev/null || \
		{ DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap >/dev/null; }; \
	else echo "bubblewrap is missing and this is not root: the local Python sandbox tests will skip (and fail under CI=true)"; fi

# shellcheck lints the shipped shell scripts (jobs/vllm) in their tests.
shellcheck:
	@if command -v shellcheck >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		echo "installing shellcheck for the script lint tests"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q shellcheck >/dev/null || \
		{ DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q shellcheck >/dev/null; }; \
	else echo "shellcheck is missing and this is not root: the script lint test will skip (and fail under CI=true)"; fi

# PyTorch (Debian 12: torch 1.13.1, CPU) for the reference trainer's tests
# in jobs/trainers, and jinja2 (which python3-torch does not pull in) for
# their chat-template tests; installing them needs root and takes minutes
# the first time. Skipped when some python3 on the machine imports both.
torch:
	@for py in "$${WHALE_PYTHON:-}" python3 /usr/bin/python3; do \
		[ -n "$$py" ] && "$$py" -c 'import torch, jinja2' 2>/dev/null && exit 0; \
	done; \
	echo "installing python3-torch and python3-jinja2 for the trainer tests"; \
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-torch python3-jinja2 >/dev/null || \
	{ DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-torch python3-jinja2 >/dev/null; }

$(VERSITYGW):
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)

test: deps tools
	$(GO) vet ./...
	$(GO) test $(TEST_FLAGS) ./...

# Unit tests only: no versitygw, no child processes that take long.
test-short: deps
	$(GO) test -short $(TEST_FLAGS) ./...

# The second step is `whale analyze` against DuckDB on one 1M-row rollouts
# file, with a check that both compute the same numbers: analysis/duckbench
# is a module of its own, so that only it builds DuckDB (cgo, ~40 s), never
# `make build` or `make test`. It runs when BENCH names one of its
# benchmarks (Versus, WhaleMemory), or all of them.
bench: deps tools
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -timeout 60m ./...
	@if echo 'Versus WhaleMemory' | grep -qE -- '$(BENCH)'; then \
		echo 'cd analysis/duckbench && go test -run TestSameNumbers -bench $(BENCH)'; \
		cd analysis/duckbench && $(GO) test -run TestSameNumbers -bench '$(BENCH)' -benchmem -timeout 30m .; \
	fi

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

demo: build
	./bin/whale demo --dir $(DEMO_DIR)

clean:
	rm -rf bin $(DEMO_DIR)
