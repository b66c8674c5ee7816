"""Run by the CDK virtualenv's Python: the ``SqsJobs`` construct with monitoring options asked for.

The outbox lag alarm, and a depth alarm of its own for one queue with priority levels
(``queue_depth_by_queue``) while another queue has none. ``python tests/infra/monitoring_synth.py OUTDIR`` synthesizes one stack and
prints its template as JSON, for test_outbox_alarm.py and test_depth_alarm.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

from lambda_synth import print_stack  # this folder's: it puts this checkout first on sys.path
from sqsjobs_cdk import DepthAlarm, Monitoring

from sqsjobs import App

app = App("outboxed", priority_queues={"audit"})
app.job("orders.ship")(lambda payload, ctx: None)
app.job("orders.audit", queue="audit")(lambda payload, ctx: None)
app.job("orders.rebuild", queue="rebuilds")(lambda payload, ctx: None)


if __name__ == "__main__":
    monitoring = Monitoring(
        outbox_max_lag_s=120,
        queue_depth_by_queue={"audit": DepthAlarm(threshold=50, minutes=3), "rebuilds": None},
    )
    print_stack(Path(sys.argv[1]), "Outboxed", app, "tests.infra.monitoring_synth:app", monitoring=monitoring)
