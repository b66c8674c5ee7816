"""SQS transport: sans-I/O requests (``sqs``) and the worker's batching message operations (``batcher``)."""
