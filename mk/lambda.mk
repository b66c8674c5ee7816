# Lambda worker: the deployment zip, and the dependency cache the e2e test needs (docs/lambda.md).
LAMBDA_APP ?= $(SQSJOBS_APP)
LAMBDA_PYTHON ?= 3.12
LAMBDA_ARCH ?= x86_64
LAMBDA_ZIP ?= dist/lambda.zip

.PHONY: lambda-zip lambda-e2e-deps

# `make lambda-zip LAMBDA_APP=shop.jobs:app [LAMBDA_PYTHON=3.12] [LAMBDA_ARCH=arm64]`: dependencies
# exactly as locks/lambda.txt pins and hashes them, bytecode compiled by python$(LAMBDA_PYTHON) when
# it is on PATH.
lambda-zip: $(BIN)/sqsjobs
	@test -n "$(LAMBDA_APP)" || { echo "set LAMBDA_APP=pkg.module:app (or SQSJOBS_APP)" >&2; exit 2; }
	$(BIN)/sqsjobs package lambda --app $(LAMBDA_APP) --python-version $(LAMBDA_PYTHON) \
	  --arch $(LAMBDA_ARCH) --output $(LAMBDA_ZIP) --lock locks/lambda.txt

# MiniStack runs functions on its own interpreter: install the dependencies for that Python and this
# machine's architecture into build/lambda here (from PyPI), so tests/e2e builds its zip offline. The
# tests' builds name no lock (they are keyed by what they install), so neither does this cache.
# A cache hit costs one CLI start.
lambda-e2e-deps: $(BIN)/sqsjobs $(MS_VENV)/bin/ministack
	$(BIN)/sqsjobs package lambda --deps-only \
	  --python-version "$$($(MS_VENV)/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
	  --arch "$$(uname -m | sed 's/aarch64/arm64/')"

test: lambda-e2e-deps
