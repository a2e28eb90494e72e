# tally: the two commands of the README, and what they need.
#   make demo   set up everything, run the real handler on events/ against DynamoDB Local, check the counts
#   make test   set up everything, lint, type-check, run every test (unit, moto, DynamoDB Local, template)

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SAM_VENV := .venv-sam
export TALLY_SAM_BIN := $(CURDIR)/$(SAM_VENV)/bin/sam
export SAM_CLI_TELEMETRY := 0

.PHONY: demo test lint typecheck unit integration install sam clean bench-hot-key

demo: install
	$(BIN)/python -m tally.local.demo

test: install sam lint typecheck
	$(BIN)/pytest -n 2 --dist loadfile

lint: install
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

typecheck: install
	$(BIN)/mypy

unit: install
	$(BIN)/pytest tests/unit tests/template -q

integration: install
	$(BIN)/pytest tests/integration -q

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "tally needs Python 3.11+"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/python -c 'from tally.local.dynamodb_local import ensure_installed; print("DynamoDB Local:", ensure_installed())'
	touch $@

# The SAM CLI pins its own boto3 and cfn-lint: it lives in a venv of its own, only for `sam validate --lint`.
sam: $(SAM_VENV)/.installed

$(SAM_VENV)/.installed:
	$(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install --quiet --upgrade pip
	$(SAM_VENV)/bin/pip install --quiet aws-sam-cli
	touch $@

clean:
	rm -rf $(VENV) $(SAM_VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .aws-sam

# One hot key under concurrent consumers, with and without write sharding (docs/sharding.md).
bench-hot-key: install
	$(BIN)/python -m bench.hot_key --events 20000 --consumers 4 --shards 8
