# The local stack (issue 6, docs/deploy.md): MiniStack on the host, no Docker, on LocalStack's port.
#   make localstack-up     start MiniStack on 127.0.0.1:$(LOCALSTACK_PORT), provision $(LOCALSTACK_APP)
#   make localstack-down   stop it (its whole process group: the Lambda workers it forked too)
#   make localstack-smoke  up, the lifecycle tests against it (SQSJOBS_TEST_ENDPOINT), down
# With Docker, localstack/docker-compose.yml runs LocalStack itself plus the worker image instead.
LOCALSTACK_PORT ?= 4566
LOCALSTACK_DIR ?= $(CURDIR)/.localstack
LOCALSTACK_APP ?= examples.shop:app
LOCALSTACK_URL := http://127.0.0.1:$(LOCALSTACK_PORT)
LOCALSTACK_SMOKE ?= tests/integration/test_lifecycle.py

.PHONY: localstack-up localstack-down localstack-smoke

localstack-up: $(BIN)/sqsjobs $(MS_VENV)/bin/ministack
	$(BIN)/python localstack/ministack_ctl.py up --port $(LOCALSTACK_PORT) --dir $(LOCALSTACK_DIR) \
	  --bin $(CURDIR)/$(MS_VENV)/bin/ministack
	SQSJOBS_APP=$(LOCALSTACK_APP) SQSJOBS_ENDPOINT_URL=$(LOCALSTACK_URL) SQSJOBS=$(CURDIR)/$(BIN)/sqsjobs \
	  sh localstack/provision.sh

localstack-down: $(BIN)/sqsjobs
	$(BIN)/python localstack/ministack_ctl.py down --dir $(LOCALSTACK_DIR)

localstack-smoke: localstack-up
	SQSJOBS_TEST_ENDPOINT=$(LOCALSTACK_URL) AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test \
	  AWS_DEFAULT_REGION=us-east-1 $(BIN)/pytest -q $(LOCALSTACK_SMOKE); \
	  status=$$?; $(MAKE) --no-print-directory localstack-down; exit $$status
