"""The same no-op job for each framework the benchmark compares (one module per framework)."""
