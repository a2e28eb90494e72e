# tally: the two commands of the README, and what they need.
#   make demo   set up everything, run 100,000 events through the local stack and the real handlers, check every count
#   make test   set up everything, lint, type-check, build the docs site strictly, run every test (unit, moto,
#               DynamoDB Local, template, the docs' commands, and the built Lambda package under the Runtime
#               Interface Emulator: tests/artifact)
#   make test-fast  the developer's loop: every test that needs no emulator and no build (tests/support/tiers.py)
#   make lock   recompile the locks from pyproject.toml: src/requirements.txt (the Lambda package's dependencies) and
#               tests/requirements-dev.txt (the development environment's); LOCK_ARGS=--upgrade moves every pin to
#               the newest release, LOCK_ARGS='--upgrade-package moto' one

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEV_LOCK := tests/requirements-dev.txt
LOCK_ARGS ?=
SAM_VENV := .venv-sam
CHECKOV_VENV := .venv-checkov
export TALLY_SAM_BIN := $(CURDIR)/$(SAM_VENV)/bin/sam
export TALLY_CHECKOV_BIN := $(CURDIR)/$(CHECKOV_VENV)/bin/checkov
export SAM_CLI_TELEMETRY := 0

# The Lambda runtime's Python (python3.13): `sam build` needs it, and tests/artifact runs the built package on it.
# The first python3.13 on PATH, else pyenv's newest 3.13.x.
# (pyenv's shim is on PATH even where its python3.13 is not selected: ask the interpreter itself.)
PYTHON313 ?= $(shell python3.13 -c 'import sys; print(sys.executable)' 2>/dev/null || ls -d $$(pyenv root 2>/dev/null || echo $$HOME/.pyenv)/versions/3.13*/bin/python3.13 2>/dev/null | sort -V | tail -1)
export TALLY_PYTHON313 := $(PYTHON313)

.PHONY: demo demo-smoke test test-loaded test-collect test-fast docs docs-serve cli-reference python313 lock lint typecheck unit integration install sam checkov clean bench-hot-key bench-journal bench-plan bench-plan-numbered bench-cost bench-duration bench-patterns bench bench-smoke chaos chaos-smoke sam-local

demo: install
	$(BIN)/python -m tally_local.demo

# The same at 5,000 events, in about a minute (tests/integration/test_demo.py runs it smaller still).
demo-smoke: install
	$(BIN)/python -m tally_local.demo --events 5000

# The whole suite, Hypothesis at its `ci` profile (tests/conftest.py), the 40 slowest tests listed at the end.
# loadgroup: tests go to the workers one by one, a module sharing a module-scoped fixture as one group
# (tests/support/tiers.py), so no long file holds one worker while the other idles. Four workers on two cores: the
# tests wait on emulators about half their time, and four finish sooner than three (measured: docs/testing.md).

# What the tests need is installed first. The checks (ruff, the import contracts, mypy, the strict docs build) then
# run beside the tests, on the core time the tests leave idle while they wait on emulators, rather than ahead of them
# (alone they took 18 s of wall time: mypy 15.6 s, the docs 2.0 s, ruff and the contracts 0.7 s): each check's output
# is printed whole when it ends, and the target fails if the checks or the tests do.
test: python313
	$(MAKE) --no-print-directory -j3 --output-sync=target install sam checkov test-collect
	@$(MAKE) --no-print-directory -j3 --output-sync=target lint typecheck docs & checks=$$!; \
	TALLY_HYPOTHESIS_PROFILE=ci $(BIN)/pytest -n 4 --dist loadgroup --durations=40 --cpu-budget; tests=$$?; \
	wait $$checks; checked=$$?; \
	if [ $$checked -ne 0 ]; then echo "make test: a check failed (ruff, import contracts, mypy or the docs build: see above)"; fi; \
	exit $$(( tests != 0 || checked != 0 ))

# pytest rewrites the asserts of each test module it imports and keeps the result beside the module's bytecode, but
# not where PYTHONDONTWRITEBYTECODE is set (this project's CI machines): there each of the workers rewrote every
# module again, 10.2 s of CPU a collection against 5.2 s from kept results. One collection with bytecode writing on,
# beside the SAM CLI's and checkov's installs, keeps them for the workers and for the pytest runs tests start.
test-collect: install
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest --collect-only -q > /dev/null

# make test with each core shared: two busy loops beside it, stopped when it ends, whatever happens.
# It finds what leans on the machine's pace: its first run (2026-12-04) found an audit test whose clock ran at it.
test-loaded:
	@$(PYTHON) -c 'while True: pass' & one=$$!; $(PYTHON) -c 'while True: pass' & two=$$!; \
	trap 'kill $$one $$two' EXIT; $(MAKE) --no-print-directory test

# No DynamoDB Local, no moto server, no `sam build`: the markers are set from the fixtures a test uses, and a test
# that starts one of them unmarked fails (tests/support/tiers.py); nor the few tests marked slow (seconds of CPU
# each: the planner's searches, cfn-lint, the IAM drive). Hypothesis at its `dev` profile, on both cores.
test-fast: install
	TALLY_HYPOTHESIS_PROFILE=dev $(BIN)/pytest -q -n 2 -m "not dynamodb_local and not moto and not build and not slow" --durations=10 --cpu-budget

# The documentation site (mkdocs.yml, docs/): a strict build fails on a broken link or anchor, or a page missing from
# the nav. Writes site/ (not committed).
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The CLI reference (docs/reference/cli.md), written from the commands themselves: run it after changing a command,
# an option or a help text (tests/unit/test_cli_reference.py fails until the page matches them).
cli-reference: install
	$(BIN)/python -m tally_local.cli_reference > docs/reference/cli.md.new && mv docs/reference/cli.md.new docs/reference/cli.md

# The same site served with live reload on http://127.0.0.1:8000.
docs-serve: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# tests/artifact builds the package with `sam build` and runs it on python3.13: never skipped, so say what is missing.
python313:
	@test -n "$(PYTHON313)" && "$(PYTHON313)" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 13))' || { \
	  echo "make test needs python3.13 (Lambda's runtime) for tests/artifact: put it on PATH, install it with"; \
	  echo "'pyenv install 3.13', or pass PYTHON313=/path/to/python3.13"; exit 1; }
	@echo "python3.13: $(PYTHON313)"

# The package's dependencies, pinned with hashes for every platform (src/Makefile installs the arm64 or x86_64
# wheels from it); tests/artifact/test_lock.py fails when it no longer satisfies pyproject.toml. Also the
# stand-in for Lambda's runtime in tests/artifact (awslambdaric and an older boto3 than the package's).
# The development environment is installed from its own lock (every tool the tests, lint, docs and benchmarks use,
# for Python 3.11 and newer), so that a release published between two runs of one commit cannot turn CI red (moto
# 5.2.6 did, on 2026-12-04). It is compiled under the package's lock, so the tests run the versions Lambda runs.
# tests/artifact/test_lock.py fails when it no longer satisfies pyproject.toml's extras, pins a package the package
# ships at another version, or the venv running the tests was not installed from it. .ci/latest (the scheduled job)
# moves every pin to its newest release (LOCK_ARGS=--upgrade) and runs CI.
lock: install
	$(BIN)/uv pip compile pyproject.toml --python-version 3.13 --universal --generate-hashes --quiet $(LOCK_ARGS) \
	  --custom-compile-command 'make lock' -o src/requirements.txt
	$(BIN)/uv pip compile tests/artifact/runtime-requirements.in --python-version 3.13 --universal --generate-hashes \
	  --quiet $(LOCK_ARGS) --custom-compile-command 'make lock' -o tests/artifact/runtime-requirements.txt
	$(BIN)/uv pip compile pyproject.toml --extra dev --python-version 3.11 --universal --generate-hashes --quiet \
	  $(LOCK_ARGS) -c src/requirements.txt --custom-compile-command 'make lock' -o $(DEV_LOCK)

lint: install
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/lint-imports

typecheck: install
	$(BIN)/mypy

unit: install
	$(BIN)/pytest tests/unit tests/template -q

integration: install
	$(BIN)/pytest tests/integration -q

install: $(VENV)/.installed

# The virtual environment is compiled to bytecode as it is installed (uv does not by default): where
# PYTHONDONTWRITEBYTECODE is set, as on this project's CI machines, no import writes a .pyc, so every process would
# compile from source every module it imports, and the test suite starts hundreds (a local stack's start: 12 s of
# CPU without, 7.4 s with). src/ is compiled too; a .pyc its source has since changed is ignored. The SAM CLI's and
# checkov's venvs are not: a few runs each save less (checkov: 1.4 s of CPU a run) than compiling them costs.
# Every package from the lock, hash-checked (uv at the lock's version first, so that it never replaces itself), then
# tally itself, editable, without dependencies: the lock holds them all.
$(VENV)/.installed: pyproject.toml $(DEV_LOCK)
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "tally needs Python 3.11+"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	awk '/^uv==/ { keep = 1 } /^[^ ]/ && !/^uv==/ { keep = 0 } keep && !/#/' $(DEV_LOCK) > $(VENV)/uv-requirement.txt
	$(BIN)/pip install --quiet --require-hashes -r $(VENV)/uv-requirement.txt
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python --require-hashes -r $(DEV_LOCK)
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python --no-deps -e .
	$(BIN)/python -m compileall -q src
	$(BIN)/python -c 'from tally_local.dynamodb_local import ensure_installed; print("DynamoDB Local:", ensure_installed())'
	touch $@

# Opt-in, needs Docker (not part of make test): sam build for this machine, then every events/ file through
# `sam local invoke` against the local stack, compared with events/expected.json (tests/artifact/sam_local.py;
# docs/how-to/sam-local-invoke.md). Where no registry is reachable, sam-local-setup.sh builds the base image and
# runs dockerd on $(SAM_DOCKER_SOCK), which is used when DOCKER_HOST is not set.
SAM_DOCKER_SOCK ?= $(or $(TMPDIR),/tmp)/samdocker/run/docker.sock
sam-local: python313 install sam
	@if [ -z "$$DOCKER_HOST" ] && [ -S "$(SAM_DOCKER_SOCK)" ]; then export DOCKER_HOST=unix://$(SAM_DOCKER_SOCK); fi; \
	  $(BIN)/python -m tests.artifact.sam_local

# The SAM CLI pins its own boto3 and cfn-lint: it lives in a venv of its own, made by the main venv's uv (no pip to
# bootstrap: 4 s of CPU saved per venv), at the version the docs give (docs/how-to/deploy.md, whose `sam --version`
# the docs test runs). `sam` is linked into .venv/bin, so activating .venv puts it on PATH for sam build and deploy.
SAM_CLI_VERSION := 1.170.0
sam: $(SAM_VENV)/.installed-$(SAM_CLI_VERSION)

$(SAM_VENV)/.installed-$(SAM_CLI_VERSION): | $(VENV)/.installed
	$(BIN)/uv venv --quiet --clear --python $(PYTHON) $(SAM_VENV)
	$(BIN)/uv pip install --quiet --python $(SAM_VENV)/bin/python 'aws-sam-cli==$(SAM_CLI_VERSION)'
	ln -sfn ../../$(SAM_VENV)/bin/sam $(BIN)/sam
	touch $@
	@echo "SAM CLI $(SAM_CLI_VERSION): $(SAM_VENV)/bin/sam, linked as $(BIN)/sam (. $(BIN)/activate puts it on PATH)"

# checkov (the template's security lint, tests/template/test_security_lint.py) pins its own dependencies too.
checkov: $(CHECKOV_VENV)/.installed

$(CHECKOV_VENV)/.installed: | $(VENV)/.installed
	$(BIN)/uv venv --quiet --clear --python $(PYTHON) $(CHECKOV_VENV)
	$(BIN)/uv pip install --quiet --python $(CHECKOV_VENV)/bin/python 'checkov>=3.2,<4'
	touch $@

clean:
	rm -rf $(VENV) $(SAM_VENV) $(CHECKOV_VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .aws-sam .import_linter_cache site

# Every benchmark and experiment runs as `python -m bench NAME [ARGS]` (bench/__main__.py; `python -m bench` lists
# them); the targets below are the sizes the docs quote.

# One hot key under concurrent consumers, with and without write sharding (docs/sharding.md).
bench-hot-key: install
	$(BIN)/python -m bench hot-key --events 20000 --consumers 4 --shards 8

# tally against the naive counter and Powertools idempotency, on one DynamoDB Local it starts and stops
# (docs/benchmarks.md). Full size: several minutes; writes docs/benchmarks.{md,png,json}.
bench: install
	$(BIN)/python -m bench suite --size full
	$(BIN)/python -m bench patterns --all --json-out docs/patterns.json

# The cost per event of each counter pattern beside plain sums (docs/explanation/costs.md).
bench-patterns: install
	mkdir -p .bench && $(BIN)/python -m bench patterns --all --json-out .bench/patterns.json

# The same at a tiny size, in seconds, written under .bench/ (tests/bench/test_bench_smoke.py runs it in CI).
bench-smoke: install
	$(BIN)/python -m bench suite --size smoke

# Exactly-once under faults (docs/reliability.md): >= 100,000 events from SQS and Kinesis through the real
# pipeline on DynamoDB Local, >= 1,000 injected faults, two DLQ redrives; exits 1 if anything is lost or doubled.
chaos: install
	$(BIN)/python -m bench chaos --config full --json-out docs/chaos.json

# The same at a small size, in seconds (tests/integration/test_chaos.py runs it in the test suite).
chaos-smoke: install
	$(BIN)/python -m bench chaos --config smoke

# tally plan's predicted write units per event against measured runs (docs/explanation/costs.md); exits 1 on a
# miss over 10%. Writes .bench/plan_check.json.
bench-plan: install
	mkdir -p .bench && $(BIN)/python -m bench plan-check --min-events 20000 --json-out .bench/plan_check.json

# Single-event messages under numbered ids beside random ids and the naive ADD (docs/explanation/costs.md).
# Writes .bench/plan_check_numbered.json.
bench-plan-numbered: install
	mkdir -p .bench && $(BIN)/python -m bench plan-check --numbered --min-events 20000 --json-out .bench/plan_check_numbered.json

# Write units per event against batch size, windows on/off, model curves with measured points on them
# (docs/explanation/costs.md): writes docs/cost-by-batch-size.svg and .json.
bench-cost: install
	$(BIN)/python -m bench cost-chart --measure --min-events 20000

# Handler duration through tally_local.latency_proxy (published AWS latencies in front of DynamoDB Local), one
# direct transaction at a time and four (docs/explanation/costs.md, "Handler duration").
bench-duration: install
	mkdir -p .bench && $(BIN)/python -m bench duration --proxy --batches 2 --write-concurrency 1 --write-concurrency 4 --json-out .bench/duration.json

# The commit journal against the chunked path on workload U, packed (docs/journal.md).
bench-journal: install
	$(BIN)/python -m bench journal --events 20000
