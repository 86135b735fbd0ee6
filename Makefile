# asrprof: `make demo` runs the main job, `make test` runs the tests.
# Both install what they need (Debian packages, Go modules) idempotently.

GO       ?= go
BIN      := bin/asrprof
VERSION  := $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X github.com/asrprof/asrprof/capture.Version=$(VERSION)
PORT     ?= 18000
# go-nvml's cgo wrappers call NVML functions its header marks deprecated;
# without this every build prints some hundred lines of gcc warnings.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
# -trimpath keeps the checkout's folder out of what Go compiles, so its
# build cache serves any clone: a fresh clone's `go vet` and test builds
# took 79 s with the cache warm from another clone, and 22 s with this
# (docs/PERFORMANCE.md, "make test and its Debian packages"). Tests find
# the repository from their working directory (bundletest.Root), not from
# their source file's path, which this makes module-relative.
export GOFLAGS := -trimpath $(GOFLAGS)

.PHONY: all build deps data demo test fuzz test-short bench test-gpu gpu-study gpu-router gpu-pack generate lint clean jaeger bin/gpu.test bin/cpu.test

all: build

deps:
	@tools/deps.sh

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/asrprof

data: deps
	@refserver/data/make_refset.sh
	@refserver/data/make_diarset.sh

# The main job: reference server + refset + a capture, tables printed,
# bundle left in runs/demo/.
demo: deps build data
	@PORT=$(PORT) tools/demo.sh

# Fuzz targets (`make fuzz`, last in `make test`) run for a fixed number of
# inputs each (about 3-5 s here), two at a time: 24 s one after another,
# each CPU-bound on its two workers. A target's output prints whole when it
# ends. A count, not a duration: with `-fuzztime 5s` Go 1.26's
# coordinator can fail a clean run with "context deadline exceeded" when the
# deadline lands mid-exec (golang/go#75804, fixed in Go 1.27). FUZZTIME=30s
# (or 1000000x) overrides every target's budget. A new input's minimization
# is bounded by a count too: Go's default (60 s) once held FuzzProbeWAV at
# 0 execs/s for 57 s of a 66 s run (another run: 26 s).
FUZZ := ./trace/otlp:FuzzHTTPHandler:10000x ./bundle/events:FuzzEventLine:40000x \
        ./bench/protocol:FuzzSSE:50000x ./bench/audio:FuzzProbeWAV:150000x \
        ./bench/score:FuzzNormalizeEnglish:8000x
FUZZTIME ?=

# -timeout is per test binary. cmd/asrprof's takes about 9 min here under
# the whole suite's load; one CI machine ran every package 2.2-2.6x slower
# (refserver 220 s against 84 s), which put it past a 20 min timeout, and
# the panic then failed the tests still running. 50 min stays inside CI's
# 90 while leaving a slow machine room.
# ./cmd/asrprof is named first so that its binary, the longest to run
# (make test's wall time is its), starts before the other packages' tests
# take both of go test's slots (it had started 27 s after go test did).
test: deps data jaeger
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 50m ./cmd/asrprof ./...
	@$(MAKE) --no-print-directory fuzz

fuzz:
	@printf '%s\n' $(FUZZ) | xargs -P 2 -I{} sh -c 'f={}; pkg=$${f%%:*}; rest=$${f#*:}; fn=$${rest%%:*}; n=$${rest#*:}; \
	  budget="$(FUZZTIME)"; [ -n "$$budget" ] || budget=$$n; \
	  out=$$($(GO) test -run "^\$$" -fuzz "^$$fn\$$" -fuzztime $$budget -fuzzminimizetime 1000x $$pkg 2>&1); rc=$$?; \
	  printf "fuzz %s (%s, %s)\n%s\n" $$fn $$pkg $$budget "$$out"; exit $$rc'

# Jaeger all-in-one, built once into ~/.cache/asrprof (about 4 minutes the first time on the 2-core CI machine).
jaeger:
	@tools/jaeger.sh >/dev/null

# Quick loop for development (no eBPF, no subprocess servers).
test-short:
	$(GO) test -short ./...

bench: deps build
	@tools/bench.sh

# For the accelerator machine (docs/GPU.md). `make gpu-pack` here puts the
# binary and the dataset in gpu-pack/; on the GPU machine, `make test-gpu`
# (or tools/test-gpu.sh where there is no make) runs `asrprof capture` with
# default flags against the whisper engine and checks gpu.jsonl and
# `analyze gpu`; first it runs the tests that only run there (NVML, the otel
# profiler's Python frames, CPython 3.12's perf trampolines), by name, and says
# which ran (go test, or the prebuilt bin/gpu.test and bin/cpu.test where
# there is no Go). `make gpu-study` runs the seed study (tools/gpu-study.sh).
test-gpu:
	@tools/test-gpu.sh

gpu-study:
	@tools/gpu-study.sh study gpu-bound host-bound

# Two whisper engines behind refserver's router (docs/GPU.md).
gpu-router:
	@tools/gpu-router.sh even slow

gpu-pack: build data
	@tools/gpu-pack.sh

bin/gpu.test:
	$(GO) test -c -ldflags='-s -w' -o bin/gpu.test ./probe/gpu

bin/cpu.test:
	$(GO) test -c -ldflags='-s -w' -o bin/cpu.test ./probe/cpu

generate:
	$(GO) generate ./...

lint:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }

clean:
	rm -rf bin runs
