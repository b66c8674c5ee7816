"""CDK v2 constructs that deploy an sqsjobs App: ``SqsJobs`` and its options."""

from __future__ import annotations

from .bundling import LocalBundle
from .construct import SqsJobs
from .job_events import JobEvents
from .options import DepthAlarm, FargateWorker, HttpApi, LambdaWorker, Monitoring, Sweeper
from .tracing import Tracing

__all__ = [
    "DepthAlarm",
    "FargateWorker",
    "HttpApi",
    "JobEvents",
    "LambdaWorker",
    "LocalBundle",
    "Monitoring",
    "SqsJobs",
    "Sweeper",
    "Tracing",
]
