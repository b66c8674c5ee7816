# Chaos soak (issue 8): thousands of jobs through killed workers and injected AWS faults, on a private
# MiniStack behind the fault proxy (tests/soak/faults.py). Writes tests/soak/results/soak-<time>-seed<seed>.{json,md}.
# Figures for the README: run it when `uptime` shows a low load (the machine has 2 shared cores).
#   make soak                      5,000 jobs, 10 % faults, a kill every 2-5 s
#   make soak SOAK_SEED=7 SOAK_JOBS=10000
SOAK_JOBS ?= 5000
SOAK_FAULTS ?= 0.10
SOAK_SEED ?= 1
SOAK_ARGS ?=

.PHONY: soak
soak: $(BIN)/sqsjobs $(MS_VENV)/bin/ministack
	SQSJOBS_MINISTACK_BIN=$(CURDIR)/$(MS_VENV)/bin/ministack $(BIN)/python -m tests.soak \
		--jobs $(SOAK_JOBS) --fault-rate $(SOAK_FAULTS) --seed $(SOAK_SEED) $(SOAK_ARGS)
