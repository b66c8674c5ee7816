"""Run by the CDK virtualenv's Python: the ``SqsJobs`` construct with the outbox lag alarm asked for.

``python tests/infra/outbox_synth.py OUTDIR`` synthesizes one stack and prints its template as JSON,
for test_outbox_alarm.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

from lambda_synth import print_stack  # this folder's: it puts this checkout first on sys.path
from sqsjobs_cdk import Monitoring

from sqsjobs import App

app = App("outboxed")
app.job("orders.ship")(lambda payload, ctx: None)


if __name__ == "__main__":
    monitoring = Monitoring(outbox_max_lag_s=120)
    print_stack(Path(sys.argv[1]), "Outboxed", app, "tests.infra.outbox_synth:app", monitoring=monitoring)
