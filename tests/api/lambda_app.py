"""The App the Lambda handler tests load by path (``SQSJOBS_APP=tests.api.lambda_app:app``)."""

from __future__ import annotations

from sqsjobs import App
from tests.cli import jobs_app
from tests.conftest import FAST

app = jobs_app.register(App("api-lambda", **FAST))
