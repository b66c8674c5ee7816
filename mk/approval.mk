# Durable steps and waits (issue 32): an order that charges, waits for approval, then ships, on the embedded emulator.
#   make approval
.PHONY: approval
approval: $(BIN)/sqsjobs
	$(BIN)/python -m examples.approval
