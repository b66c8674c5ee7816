# bench/: sqsjobs vs Celery vs Dramatiq on SQS (issue 7). See docs/bench.md.
# The peers live in their own virtualenv so the library's dependencies stay clean.
BENCH_VENV := bench/.venv-bench
BENCH_PY := $(BENCH_VENV)/bin/python
BENCH_ENV := PYTHONPATH=$(CURDIR) SQSJOBS_MINISTACK_BIN=$(CURDIR)/$(MS_VENV)/bin/ministack

.PHONY: bench bench-smoke bench-venv bench-profile bench-scale

$(BENCH_PY): bench/requirements-peers.txt | $(UV)
	$(UV_VENV) $(BENCH_VENV)
	$(UV_INSTALL) --python $(BENCH_PY) -r bench/requirements-peers.txt
	touch $@

bench-venv: $(BENCH_PY)

# Full comparison: 4 configurations x 2 proxy latencies x 3 runs, about 6-8 minutes on 2 cores.
bench: $(BIN)/sqsjobs $(MS_VENV)/bin/ministack $(BENCH_PY)
	$(BENCH_ENV) $(BIN)/python -m bench.harness --out bench/results/bench $(BENCH_ARGS)

# The same harness on a tiny backlog (under a minute); `make test` runs it through tests/bench/.
bench-smoke: $(BIN)/sqsjobs $(MS_VENV)/bin/ministack $(BENCH_PY)
	$(BENCH_ENV) $(BIN)/python -m bench.harness --smoke --out bench/results/tmp/smoke $(BENCH_ARGS)

# py-spy profile of the sqsjobs worker while it drains a backlog (where the CPU per job goes).
bench-profile: $(BIN)/sqsjobs $(MS_VENV)/bin/ministack $(BENCH_PY)
	$(BENCH_ENV) $(BIN)/python -m bench.profile --out bench/results/profile $(BENCH_ARGS)

# 1, 2 and 4 sqsjobs worker processes (c32 each) drain one backlog, +0 and +10 ms: about 5 minutes.
# sqsjobs only, so the peers' virtualenv is not needed.
bench-scale: $(BIN)/sqsjobs $(MS_VENV)/bin/ministack
	$(BENCH_ENV) $(BIN)/python -m bench.scale --out bench/results/scale $(BENCH_ARGS)

# tests/bench/test_bench_smoke.py needs the peers' virtualenv (one-time install, ~40 s).
test: $(BENCH_PY)
