# Every target builds what it needs; `make test` works on a fresh clone with only python3 on PATH.
PY ?= python3
# The virtualenvs (library, MiniStack, CDK, bench peers) are independent: build them side by side.
MAKEFLAGS += --jobs=4 --output-sync=target
VENV := .venv
MS_VENV := .venv-ministack
BIN := $(VENV)/bin

.PHONY: test lint typecheck unit demo clean

$(BIN)/sqsjobs: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade 'pip>=25.1'  # 25.1: --group (PEP 735 dependency groups)
	$(BIN)/pip install -q -e '.[api,postgres,django]' --group dev
	touch $@

# (every install here): pip would byte-compile every module of every package (aws-cdk-lib's
# are huge); Python compiles what a run imports, once, on first import.
# MiniStack pins botocore exactly, so it lives in its own virtualenv (see tests/emulators.py).
$(MS_VENV)/bin/ministack:
	$(PY) -m venv $(MS_VENV)
	$(MS_VENV)/bin/pip install -q 'ministack==1.5.33'

LINTED := $(wildcard sqsjobs tests examples lambda_handlers bench infra)

lint: $(BIN)/sqsjobs
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)

typecheck: $(BIN)/sqsjobs
	$(BIN)/mypy

test: $(BIN)/sqsjobs $(MS_VENV)/bin/ministack lint typecheck
	SQSJOBS_MINISTACK_BIN=$(CURDIR)/$(MS_VENV)/bin/ministack $(BIN)/pytest -q -n 6 --dist worksteal --durations=30

demo: $(BIN)/sqsjobs
	$(BIN)/python -m examples.demo

clean:
	rm -rf $(VENV) $(MS_VENV) .pytest_cache .mypy_cache .ruff_cache

# Each area (infra, bench, soak, lambda...) keeps its targets in its own mk/<area>.mk and may add
# prerequisites to `test` there (e.g. `test: .venv-cdk/bin/python`).
-include mk/*.mk
