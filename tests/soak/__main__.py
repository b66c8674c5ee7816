"""``python -m tests.soak``: the chaos soak's command line (``make soak``); see ``tests/soak/driver.py``."""

from __future__ import annotations

from tests.soak.driver import main

raise SystemExit(main())
