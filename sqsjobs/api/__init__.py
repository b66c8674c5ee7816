"""HTTP: the JSON API and the web dashboard (``sqsjobs.api.dashboard``)."""

from __future__ import annotations
