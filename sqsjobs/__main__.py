"""``python -m sqsjobs``."""

from __future__ import annotations

from sqsjobs.cli import main

main()
