"""Slow runs: each job type's usual running time, and a running job flagged once it runs far longer (docs/observability.md)."""
