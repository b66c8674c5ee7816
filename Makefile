# Every target builds what it needs; `make test` works on a fresh clone with only python3 on PATH.
PY ?= python3
# The virtualenvs (library, MiniStack, CDK, bench peers) are independent: build them side by side.
MAKEFLAGS += --jobs=4 --output-sync=target
VENV := .venv
MS_VENV := .venv-ministack
BIN := $(VENV)/bin

.PHONY: test lint typecheck unit demo clean

# uv builds every virtualenv here: its resolver and unpacking run in Rust, and pip's installs had
# cost the suite about 300 s of CPU of its 2 cores (uv: about a fifth of that, measured on .venv).
# It lands in build/ from PyPI through the machine's own pip; nothing is installed globally.
UV_DIR := build/uv
UV := $(UV_DIR)/bin/uv
VENV_WITH := $(UV) venv -q --allow-existing

$(UV):
	$(PY) -m pip install -q --disable-pip-version-check --root-user-action=ignore --target $(UV_DIR) 'uv>=0.9,<1'

# pip is seeded into .venv: the wheel tests and Lambda packaging run `python -m pip` as users do.
# --group needs a PEP 735 installer: uv reads dependency groups.
# uv, like `python -m compileall` skipped, leaves bytecode to first import: each module a run
# imports is compiled once; aws-cdk-lib's thousands never are.
$(BIN)/sqsjobs: pyproject.toml | $(UV)
	$(VENV_WITH) --seed $(VENV)
	$(UV) pip install -q --python $(BIN)/python -e '.[api,postgres,django]' --group dev
	touch $@

# MiniStack pins botocore exactly, so it lives in its own virtualenv (see tests/emulators.py).
$(MS_VENV)/bin/ministack: | $(UV)
	$(VENV_WITH) $(MS_VENV)
	$(UV) pip install -q --python $(MS_VENV)/bin/python 'ministack==1.5.33'

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
	rm -rf $(VENV) $(MS_VENV) $(UV_DIR) .pytest_cache .mypy_cache .ruff_cache

# Each area (infra, bench, soak, lambda...) keeps its targets in its own mk/<area>.mk and may add
# prerequisites to `test` there (e.g. `test: .venv-cdk/bin/python`).
-include mk/*.mk
