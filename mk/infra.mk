# infra/: the CDK app and its checks (issue 6, docs/deploy.md).
# CDK (aws-cdk-lib, constructs, cdk-nag, cfn-lint: ~700 MB, ~90 s to install) lives in its own
# virtualenv, out of the library's dependencies; sqsjobs is installed into it (editable) because the
# construct derives the table, queues and IAM lists from the library itself.
CDK_VENV := .venv-cdk
CDK_STAMP := $(CDK_VENV)/.installed
CDK_ENV := JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20

.PHONY: infra-venv infra-synth infra-lint infra-check infra-clean

# Order-only on the library's venv: both install sqsjobs editable from this tree, and two builds
# writing sqsjobs.egg-info at once (make test builds venvs in parallel) would race.
# The construct is installed as users install it (its own distribution, infra/pyproject.toml),
# editable, with infra/requirements.txt as the lock of its ranged dependencies.
$(CDK_STAMP): infra/requirements.txt infra/pyproject.toml pyproject.toml | $(BIN)/sqsjobs
	$(UV_VENV) $(CDK_VENV)
	$(UV_INSTALL) --python $(CDK_VENV)/bin/python -r infra/requirements.txt -e . -e './infra[nag]'
	touch $@

infra-venv: $(CDK_STAMP)

# `python infra/app.py` with the CDK venv: cdk.out/ (no CDK CLI, Docker or credentials; needs node).
# Context via CDK_CONTEXT_JSON or SQSJOBS_INFRA_{APP,LAMBDA_ZIP,LOCAL}; see infra/app.py.
infra-synth: $(CDK_STAMP)
	$(CDK_ENV) $(CDK_VENV)/bin/python infra/app.py

infra-lint: $(BIN)/sqsjobs
	$(BIN)/ruff check infra
	$(BIN)/ruff format --check infra

# Everything issue 6 checks: lint, the deployment rules, the synthesized template (assertions,
# cdk-nag, cfn-lint), the MiniStack local stack and the CloudFormation deploy to MiniStack.
infra-check: infra-lint $(CDK_STAMP) $(MS_VENV)/bin/ministack lambda-e2e-deps
	SQSJOBS_MINISTACK_BIN=$(CURDIR)/$(MS_VENV)/bin/ministack $(BIN)/pytest -q tests/infra tests/unit/test_deployment.py

test: $(CDK_STAMP)

infra-clean:
	rm -rf $(CDK_VENV) cdk.out
