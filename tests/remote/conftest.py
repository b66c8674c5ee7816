"""The App of tests/apps/polyglot.py on MiniStack: external types beside a Python type, with short leases.

A record's lease of 3 s and a message's visibility of 2 s let a test outwait both in seconds.
"""

from __future__ import annotations

import pytest

from tests.apps import polyglot


@pytest.fixture
def app(ministack_url, make_app):
    app = make_app(ministack_url, lease_s=3.0, visibility_timeout_s=2)
    app.registry.include(polyglot.app.registry)
    app.limits.include(polyglot.app.limits)
    app.provision()
    return app
