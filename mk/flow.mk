# Flow control (issue 16): a paused type and a limited dependency on the embedded emulator.
#   make flow-demo
.PHONY: flow-demo
flow-demo: $(BIN)/sqsjobs
	$(BIN)/python -m examples.flow_control
