"""The ``sqsjobs`` command line: one module per command group."""
