# Workflows (issue 15): a payroll run as a tree of batches, and a chain, on the embedded emulator.
#   make payroll
.PHONY: payroll
payroll: $(BIN)/sqsjobs
	$(BIN)/python -m examples.payroll
