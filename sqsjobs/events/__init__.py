"""Job events: an EventBridge event per terminal transition, read from the table's change stream.

``catalogue`` says which change is which event (pure), ``publish`` sends them (``PutEvents``),
``relay`` reads the stream (the Lambda entry in AWS, a sweep pass locally), ``setup`` provisions
the stream and the bus. docs/events.md explains the choice of the stream over the worker.
"""
