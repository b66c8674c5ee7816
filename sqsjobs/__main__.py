"""``python -m sqsjobs``."""

from __future__ import annotations

from sqsjobs.cli.main import main

main()
