# Every target builds what it needs; `make test` works on a fresh clone with only python3 on PATH.
PY ?= python3
# The virtualenvs (library, MiniStack, CDK, bench peers) are independent: build them side by side.
MAKEFLAGS += --jobs=4 --output-sync=target
VENV := .venv
MS_VENV := .venv-ministack
BIN := $(VENV)/bin

.PHONY: test lint typecheck unit demo clean

# uv builds every virtualenv here: its resolver and unpacking run in Rust. The four virtualenvs
# took pip about 300 s of CPU and 230 s on 2 cores; uv, bytecode included, 150 s and 93 s.
# It lands in build/ from PyPI through the machine's own pip; nothing is installed globally.
UV_DIR := build/uv
UV := $(UV_DIR)/bin/uv
UV_VENV := $(UV) venv -q --allow-existing
# Bytecode is compiled at install, once: left to first import, six pytest workers and the worker
# processes they start compile the same modules side by side, and a CDK synth compiles aws-cdk-lib
# inside a timed test (in a fresh-clone run without it, the infra tests ran a minute longer each).
UV_INSTALL := $(UV) pip install -q --compile-bytecode

$(UV):
	$(PY) -m pip install -q --disable-pip-version-check --root-user-action=ignore --target $(UV_DIR) 'uv>=0.9,<1'

# pip is seeded into .venv: the wheel tests and Lambda packaging run `python -m pip` as users do.
# --group needs a PEP 735 installer: uv reads dependency groups.
$(BIN)/sqsjobs: pyproject.toml | $(UV)
	$(UV_VENV) --seed $(VENV)
	$(UV_INSTALL) --python $(BIN)/python -e '.[api,postgres,django,encryption]' --group dev
	touch $@

# MiniStack pins botocore exactly, so it lives in its own virtualenv (see tests/emulators.py).
$(MS_VENV)/bin/ministack: | $(UV)
	$(UV_VENV) $(MS_VENV)
	$(UV_INSTALL) --python $(MS_VENV)/bin/python 'ministack==1.5.33'

LINTED := $(wildcard sqsjobs tests examples lambda_handlers bench infra)

lint: $(BIN)/sqsjobs
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)

typecheck: $(BIN)/sqsjobs
	$(BIN)/mypy

# The project's own modules are installed editable, so the install compiles none of them, and a
# shell with PYTHONDONTWRITEBYTECODE=1 (as on these machines) leaves every worker, CLI and API
# process the suite starts (several hundred) compiling sqsjobs from source: 0.42 s of CPU per
# import of a test app against 0.25 s from bytecode. compileall writes it once, up front.
test: $(BIN)/sqsjobs $(MS_VENV)/bin/ministack lint typecheck
	$(BIN)/python -m compileall -q -j 0 sqsjobs tests examples lambda_handlers bench
	SQSJOBS_MINISTACK_BIN=$(CURDIR)/$(MS_VENV)/bin/ministack $(BIN)/pytest -q -n 6 --dist worksteal --durations=30

demo: $(BIN)/sqsjobs
	$(BIN)/python -m examples.demo

clean:
	rm -rf $(VENV) $(MS_VENV) .venv-django6 $(UV_DIR) .pytest_cache .mypy_cache .ruff_cache

# Each area (infra, bench, soak, lambda...) keeps its targets in its own mk/<area>.mk and may add
# prerequisites to `test` there (e.g. `test: .venv-cdk/bin/python`).
-include mk/*.mk
