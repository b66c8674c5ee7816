"""Run by the CDK virtualenv's Python: the ``SqsJobs`` construct for an App with priority levels and serialize keys.

``python tests/infra/routing_synth.py OUTDIR MAX_CONCURRENCY`` synthesizes one stack and prints, as JSON, its queues,
event source mappings and the worker's environment and queue grants, for test_routing_template.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

from lambda_synth import print_stack  # this folder's: it puts this checkout first on sys.path

from sqsjobs import App

app = App("routed", priority_queues={"reports"}, serialized_queues={"devices"})
app.job("reports.build", queue="reports")(lambda payload, ctx: None)
app.job("device.command", queue="devices")(lambda payload, ctx: None)
app.job("plain.job")(lambda payload, ctx: None)


if __name__ == "__main__":
    worker = {"max_concurrency": int(sys.argv[2])}
    print_stack(Path(sys.argv[1]), "Routed", app, "tests.infra.routing_synth:app", worker=worker)
