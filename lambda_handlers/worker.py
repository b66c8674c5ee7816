"""The SQS worker function: set the handler to ``lambda_handlers.worker.handler``.

``SQSJOBS_APP`` (e.g. ``shop.jobs:app``) names the App; it is imported here, once per container,
during Lambda's init phase (cold start), and every invocation reuses it with its clients and its
event loop. The event source mapping must report batch item failures
(``FunctionResponseTypes=["ReportBatchItemFailures"]``): the response names the records to keep.
"""

from __future__ import annotations

from sqsjobs.lambda_sqs import handler_from_env

handler = handler_from_env()
