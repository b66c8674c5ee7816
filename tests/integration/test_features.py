"""A feature is its folder and one line: ``Feature`` (``runtime/kernel.py``) on an App.

The fitness test of the App's seams: a feature written outside sqsjobs — its plug-in (a finish
hook) and its namespace of verbs (``app.audit``) — joins an App by one class attribute of a
subclass, touching nothing of sqsjobs. A real worker on the embedded moto then consults its hook at
every finish, in declaration order after sqsjobs' own, and its verbs read the App's kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqsjobs import App, JobStatus
from sqsjobs.job import AttemptOutcome
from sqsjobs.runtime.kernel import Feature, Namespace, features_of
from sqsjobs.runtime.seams import Plugin
from sqsjobs.testing import all_finished, work_until
from tests.conftest import FAST

if TYPE_CHECKING:
    from sqsjobs.delivery import Finish
    from sqsjobs.runtime.kernel import Kernel


# ── the feature's folder, as an application would write it ──────────────────────────────────
class AuditHook:
    """Remembers every job's end once it landed (a finish hook that writes nothing)."""

    ended: dict[str, list[tuple[str, str]]] = {}

    def __init__(self, app_name: str) -> None:
        self.app_name = app_name

    async def entries(self, finish: Finish) -> list[Any]:
        return []

    async def landed(self, finish: Finish) -> None:
        self.ended.setdefault(self.app_name, []).append((finish.job.id, str(finish.outcome)))


def audit_plugin(core: Kernel) -> Plugin:
    return Plugin("audit", finish=AuditHook(core.name), fields=None, types=None)


class Audit(Namespace):
    """``app.audit``: what the hook saw, read through the App's current kernel."""

    def ends(self) -> list[tuple[str, str]]:
        return AuditHook.ended.get(self.kernel.name, [])


# ── and its one line ─────────────────────────────────────────────────────────────────────────
class AuditedApp(App):
    audit = Feature(audit_plugin, Audit)


def test_a_feature_joins_an_app_by_one_line_and_a_real_worker_consults_it(moto_url):
    app = AuditedApp("featured", endpoint_url=moto_url, **FAST)

    @app.job("audited.work", max_attempts=1)
    def work(payload: dict[str, int], ctx: Any) -> int:
        if payload["n"] < 0:
            raise ValueError("negative")
        return payload["n"] * 2

    app.provision()
    try:
        ok, failing = app.enqueue("audited.work", {"n": 2}), app.enqueue("audited.work", {"n": -1})
        work_until(app, all_finished(app, [ok, failing]))
        # its hook ran at each finish; its namespace is typed and reads the App's kernel
        assert (app.get(ok).status, app.get(failing).status) == (JobStatus.SUCCEEDED, JobStatus.DEAD)
        assert sorted(app.audit.ends()) == sorted([(ok, str(AttemptOutcome.SUCCEEDED)), (failing, "dead")])
        # after sqsjobs' own features, in declaration order; the plain App has no such feature
        assert [f.name for f in features_of(AuditedApp)][-1] == "audit"
        assert [p.name for p in app.kernel.plugins][-1] == "audit"
        assert "audit" not in {f.name for f in features_of(App)} and not hasattr(App("plain"), "audit")
    finally:
        app.close()
