"""SQS transport: sans-I/O requests and the worker's batched message operations (``sqs``), queue URLs, routes, the DLQs."""
