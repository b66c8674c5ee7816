"""Transport: an App's AWS clients (``clients``); SQS's sans-I/O requests and the worker's batched message operations (``sqs``), queue URLs, routes, the DLQs."""
