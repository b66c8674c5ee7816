"""What the soak's tests share: the fault proxy tests' scratch table and queue."""

from __future__ import annotations

from tests.aws_scratch import queue_url, table  # noqa: F401 (fixtures of test_fault_proxy.py)
