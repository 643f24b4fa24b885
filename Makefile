# vmcp-trio. `make test` works on a new machine: it creates .venv and installs what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SUM := $(shell cksum pyproject.toml | cut -d' ' -f1)
# Two stamps: RUNTIME is the program alone (what `make run` needs), STAMP adds the test and
# lint tool chains on top of it (what every other target needs).
RUNTIME := $(VENV)/.runtime-$(SUM)
STAMP := $(VENV)/.installed-$(SUM)
FUZZ_SECONDS ?= 60

.PHONY: test pytest lint fuzz clean run peers mcp1 bench soak packages

$(RUNTIME): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "vmcp-trio needs Python 3.11 or newer"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	rm -f $(VENV)/.runtime-*
	touch $@

$(STAMP): $(RUNTIME)
	$(BIN)/python -m pip install --quiet -e '.[test,lint]'
	rm -f $(VENV)/.installed-*
	touch $@

## test: lint, then the whole test suite (what .ci/run runs); it replays the fuzz corpora,
## the fuzzing itself is `make fuzz`
test: lint pytest

# two workers, each test file on one of them (its module fixtures start once); free ports come
# from a range per worker (tests/helpers.free_port)
pytest: $(STAMP) peers mcp1 packages
	$(BIN)/pytest -n 2 --dist loadfile

## packages: Debian redis-server + redis-sentinel (7.0), haproxy, zsh and chromium for the tests that run
## them (no-op when installed)
packages: $(STAMP)
	$(BIN)/python scripts/system_packages.py

## peers: npm test peers (conformance suite, server-everything, inspector) with `npm ci`
peers: $(STAMP)
	$(BIN)/python scripts/peers.py

## mcp1: a separate venv with the 1.x MCP SDK, for interoperability tests with 1.x servers
mcp1: $(STAMP)
	$(BIN)/python scripts/mcp1_venv.py

## lint: ruff and mypy on the package, hadolint on the Dockerfile
lint: $(STAMP)
	$(BIN)/ruff check vmcp_trio tests fuzz examples scripts bench
	$(BIN)/mypy
	$(BIN)/hadolint Dockerfile

## bench: every benchmark in bench/; results in bench/results/latest.json
bench: $(STAMP) packages
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python bench/run.py

## soak: three replicas behind haproxy, Redis through Sentinel, mixed load of both eras for
## SOAK_MINUTES (default 10) while backends, Redis and a replica are broken on a schedule;
## report in bench/results/soak.md and soak.png
SOAK_MINUTES ?= 10
soak: $(STAMP) packages
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python bench/soak.py --minutes $(SOAK_MINUTES)

## fuzz: every fuzz/ harness for FUZZ_SECONDS seconds each (default 60), instrumented, on its
## corpus in fuzz/corpus/ with its dictionary fuzz/<name>.dict (the inputs it adds go to
## fuzz/work/); fuzz/README.md has each harness's long runs
fuzz: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[fuzz]'
	@for harness in fuzz/fuzz_*.py; do \
		name=$$(basename $$harness .py); \
		mkdir -p fuzz/work/$$name; \
		echo "== $$name ($(FUZZ_SECONDS)s)"; \
		dict=$$( [ -f fuzz/$$name.dict ] && echo -dict=fuzz/$$name.dict ); \
		$(BIN)/python $$harness fuzz/work/$$name fuzz/corpus/$$name $$dict \
			-max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -print_final_stats=1 || exit 1; \
	done

clean:
	rm -rf $(VENV) .venv-mcp1 tests/peers/node_modules fuzz/work .pytest_cache .mypy_cache \
		.ruff_cache .hypothesis

## run: the gateway on examples/quickstart.yaml at http://127.0.0.1:4483/mcp (Ctrl-C stops it)
run: $(RUNTIME)
	@$(BIN)/python scripts/foreground.py $(BIN)/vmcp serve --config examples/quickstart.yaml \
		--drain-delay 0s --diagnostics-port 4484
