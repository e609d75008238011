# pollux-nomad — see README.md. CI runs `make ci` through .ci/run.
GO      ?= go
BIN     ?= bin
PKGS    := ./...
# Packages that need no servers to test (internal/archtest checks they import no Nomad/Consul API).
PURE    := ./contract/... ./model/... ./policy/... ./sim/... ./apps/... ./workload/... ./metrics/... ./results/...
FUZZTIME ?= 20s

.PHONY: help build simulate test unit deps servers train-image cluster-up cluster-down lint check bench fuzz fidelity sia-fidelity hetero hetero-scale reliability-loop quality scale-quality load demo ci clean cloud cloud-bound

help: ## show this help
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

build: ## build bin/pollux
	$(GO) build -o $(BIN)/pollux ./cmd/pollux

test: deps servers train-image ## all tests: unit, property, fidelity, quality, and end-to-end on a real local cluster
	scripts/with-cluster.sh sh -c '$(GO) test -p 1 -count=1 -timeout 60m $(PKGS) && PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m unittest discover -s worker/python -v'

unit: ## the tests that need no servers
	$(GO) test -count=1 -timeout 60m $(PURE) ./cmd/... ./jobs/... ./demo/ ./internal/...

deps: ## install the Debian packages the tests use (PyTorch, scikit-learn, Chromium + driver, promtool), once
	scripts/install-deps.sh

train-image: ## install and start Docker, build the example job's image (deploy/examples/Dockerfile) locally, once; later runs reuse its base
	scripts/install-docker.sh
	scripts/build-train-image.sh

servers: ## build Consul v1.16.1, Nomad v1.6.1 and the Nomad Autoscaler v0.4.5 (with the local-clients target plugin) once into $$HOME/.cache/pollux
	scripts/install-servers.sh >/dev/null
	scripts/install-autoscaler.sh >/dev/null

cluster-up: servers ## start Consul + Nomad (CLUSTER_SERVERS=1|3|5 servers of each, NOMAD_CLIENTS clients with 4 fake GPUs each); writes .cluster/env
	scripts/cluster.sh up

cluster-down: ## stop the local cluster and everything it started
	scripts/cluster.sh down

lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) vet -tags load ./e2e/

check: lint ## lint + the architecture's rules (internal/archtest: layers, who may use the Nomad/Consul APIs, standalone workers) + go mod tidy leaves go.mod alone
	$(GO) test -count=1 ./internal/archtest/
	@cp go.mod /tmp/pollux-go.mod.check; cp go.sum /tmp/pollux-go.sum.check; $(GO) mod tidy; \
	  if ! cmp -s go.mod /tmp/pollux-go.mod.check || ! cmp -s go.sum /tmp/pollux-go.sum.check; then \
	    echo "go mod tidy changes go.mod/go.sum:"; diff /tmp/pollux-go.mod.check go.mod; \
	    cp /tmp/pollux-go.mod.check go.mod; cp /tmp/pollux-go.sum.check go.sum; exit 1; fi
	@echo "dependency rules ok"

bench: ## Go benchmarks (model fitting, goodput, policy rounds at 64/256/1024 GPUs)
	$(GO) test -run '^$$' -bench . -benchmem -benchtime=20x ./model/ ./policy/... ./apps/

# Every fuzz target as package:Target; `go test -fuzz` takes one target per run.
FUZZ_TARGETS := \
	./jobs/:FuzzParseSpec ./jobs/:FuzzMergeJSON ./jobs/:FuzzMergeHCL ./jobs/:FuzzParseState \
	./contract/:FuzzParseMetrics ./workload/:FuzzParse \
	./apps/:FuzzLoadPlacements ./apps/:FuzzLoadScalability ./apps/:FuzzLoadValidation \
	./apps/internal/delaunay/:FuzzReadQhull

fuzz: ## run each fuzz target for FUZZTIME
	@n=$$(grep -rh --include='*_test.go' '^func Fuzz' . | wc -l); \
	  if [ $$n -ne $(words $(FUZZ_TARGETS)) ]; then echo "fuzz: $$n fuzz targets in the tree, $(words $(FUZZ_TARGETS)) in FUZZ_TARGETS"; exit 1; fi
	@failed=; for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; name=$${t#*:}; \
	  echo "== $$pkg $$name ($(FUZZTIME))"; \
	  $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg || failed="$$failed $$name"; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: failed:$$failed"; exit 1; fi

fidelity: ## per-workload deviation of Tiresias/Optimus from the published JCTs
	$(GO) test -count=1 -run 'TestFidelity' -v -timeout 60m ./sim/

sia-fidelity: ## the sia policy under -rules sia vs the Sia artifact's run on sia-philly-1..8 (per-workload deviations)
	$(GO) test -count=1 -run 'TestSiaFidelity' -v -timeout 30m ./sim/

quality: ## Pollux vs published Pollux and vs Tiresias on generated workloads
	$(GO) test -count=1 -run 'TestQuality' -v -timeout 60m ./sim/

scale-quality: ## Pollux vs Tiresias at 256x4 and 1024x4 GPUs (generated workloads): restarts/job, p50/avg/p99 JCT, GPU-hours/job; about 25 min (SCALE_ROWS=256 one size, SCALE_RESTART=120s expensive restarts, SCALE_SIA=1 adds sia-scale-32x)
	POLLUX_SCALE_QUALITY=1 $(GO) test -p 1 -count=1 -run 'TestScaleQuality$$' -v -timeout 180m ./sim/

load: servers ## load test: LOAD_JOBS (200) jobs on LOAD_CLIENTS (8) clients x 4 GPUs, agent every LOAD_INTERVAL (10s) for LOAD_DURATION (10m); report in out/load-*.json
	$(GO) test -tags load -count=1 -run '^TestLoad$$' -v -timeout 120m ./e2e/

demo: build servers ## closed loop on a local cluster: 20 jobs of workload 1 as emulated trainers driven by the controller (~15 min), compared with the simulator
	scripts/with-cluster.sh ./$(BIN)/pollux demo -workload workload-1 -jobs 20 -speedup 100

simulate: build ## simulate workload 6 under Pollux on embedded defaults (~15 s)
	./$(BIN)/pollux simulate -workload workload-6

ci: check test ## what CI runs

clean:
	rm -rf $(BIN) out

hetero: ## type-aware pollux vs sia under -rules sia: sia-philly-1..8 and sia-helios-1..10 on t4:6x4,rtx2080ti:3x8,a100:2x8, sia-philly-1..8 on t4:16x4, sia-newtrace-1..10 and five generated held-out workloads on the 3-type cluster; about 28 min (HETERO_TABLES=1,2 picks tables, HETERO_KNOBS=1 adds Sia's restrictions as pollux variants)
	POLLUX_HETERO=1 $(GO) test -count=1 -run 'TestHetero$$' -v -timeout 120m ./sim/

reliability-loop: servers ## TestThreeServers and TestApplyUnknownOutcome RUNS times in a row (default 30), stopping at the first failure; about 2.5 min a run
	@n=$${RUNS:-30}; for i in $$(seq 1 $$n); do echo "reliability-loop: run $$i of $$n"; \
	  scripts/with-cluster.sh $(GO) test -count=1 -timeout 20m -run 'TestThreeServers$$|TestApplyUnknownOutcome$$' ./e2e/ ./nomad/ || { echo "reliability-loop: failed on run $$i of $$n"; exit 1; }; done; \
	  echo "reliability-loop: $$n of $$n runs passed"

hetero-scale: ## type-aware pollux vs sia on held-out generated workloads at 256, 768 and 2,048 GPUs of three types (-rules sia); about 9 min
	POLLUX_HETERO_SCALE=1 $(GO) test -count=1 -run 'TestHeteroScaleHeldOut$$' -v -timeout 60m ./sim/

cloud: ## cloud mode: GPU-hours and JCT of Pollux autoscaled vs fixed 16x4 vs Tiresias + queue autoscaler (11 workloads), and one ImageNet job vs fixed sizes; about 30 min on 2 shared cores; CLOUD_OUT (out/cloud) gets the summaries
	POLLUX_CLOUD_EVAL=1 POLLUX_CLOUD_OUT=$(or $(CLOUD_OUT),out/cloud) $(GO) test -p 1 -count=1 -run 'TestCloudCost|TestCloudImageNetJob' -v -timeout 180m ./sim/

cloud-bound: ## the least GPU-hours at each average JCT on the eight artifact workloads, from single-job runs at constant sizes (docs/cloud-autoscaling.md); about 4 min
	POLLUX_CLOUD_BOUND=workload-1,workload-2,workload-3,workload-4,workload-5,workload-6,workload-7,workload-8 $(GO) test -count=1 -run 'TestCloudBound$$' -v -timeout 60m ./sim/
