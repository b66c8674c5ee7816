"""Run by the CDK virtualenv's Python: the ``SqsJobs`` construct for an App that archives, with the HTTP API.

``python tests/infra/archive_synth.py OUTDIR`` synthesizes one stack and prints its template as
JSON, for test_archive_template.py.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

from lambda_synth import print_stack  # this folder's: it puts this checkout first on sys.path
from sqsjobs_cdk import HttpApi

from sqsjobs import App

app = App("archived", archive_days=400, retention={"succeeded": timedelta(days=1)}, payload_object_days=30)
app.job("orders.ship")(lambda payload, ctx: None)


if __name__ == "__main__":
    print_stack(Path(sys.argv[1]), "Archived", app, "tests.infra.archive_synth:app", api=HttpApi())
