"""``app.schedules``: the declared schedules (``app.schedule`` is ``add``), and schedules made at runtime.

Declarations are recorded by ``spec.Declarations`` and applied by ``sqsjobs schedules apply``. The
verbs below make, change, pause, resume, delete and list schedules at runtime, per tenant if given,
in their own Scheduler group that ``apply`` never touches (``sqsjobs.schedules.runtime``; costs and
IAM in docs/schedules.md). Each has a blocking and an awaitable form (``create``/``acreate``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqsjobs._aws import async_verb, sync_verb
from sqsjobs.runtime.kernel import Namespace
from sqsjobs.schedules import runtime
from sqsjobs.schedules.spec import (
    ALLOW_ALL,
    DEFAULT_CATCHUP_S,
    NAME_PATTERN,
    Declarations,
    ScheduleSpec,
    empty_payload,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime, timedelta

    from sqsjobs._aws import Flow
    from sqsjobs.runtime.kernel import Kernel
    from sqsjobs.schedules.runtime import ScheduleView

__all__ = ["NAME_PATTERN", "ScheduleSpec", "Schedules", "empty_payload"]


class Schedules(Declarations, Namespace):
    """``app.schedules``: the declarations, and the verbs of runtime schedules."""

    def __init__(self, kernel: Callable[[], Kernel]) -> None:
        Declarations.__init__(self)
        Namespace.__init__(self, kernel)

    def _create(
        self,
        name: str,
        *,
        job: str,
        cron: str | None = None,
        rate: str | None = None,
        at: str | datetime | None = None,
        timezone: str = "UTC",
        payload: Any = None,
        tenant: str | None = None,
        overlap: str = ALLOW_ALL,
        catchup_window: timedelta | float | None = DEFAULT_CATCHUP_S,
        paused: bool = False,
    ) -> Flow[ScheduleView]:
        """Make a schedule at runtime (``ScheduleExists`` if the tenant has one of that name).

        Takes what ``app.schedule`` takes, plus ``tenant`` (its jobs carry it, and ``list(tenant=)``
        finds it) and ``paused`` (made disabled). ``overlap``: ``allow_all``, ``skip``, ``buffer_one``
        or ``cancel_previous``; ``catchup_window``: how old a fire may be when it is made (after an
        outage, or missed while paused).
        """
        return runtime.create_flow(
            self.kernel,
            name,
            job=job,
            cron=cron,
            rate=rate,
            at=at,
            timezone=timezone,
            payload=payload,
            tenant=tenant,
            overlap=overlap,
            catchup_window=catchup_window,
            paused=paused,
        )

    def _update(
        self,
        /,
        name: str,
        *,
        tenant: str | None = None,
        job: str | None = None,
        cron: str | None = None,
        rate: str | None = None,
        at: str | datetime | None = None,
        timezone: str | None = None,
        payload: Any = runtime.UNCHANGED,
        overlap: str | None = None,
        catchup_window: timedelta | float | None = runtime.UNCHANGED,
    ) -> Flow[ScheduleView]:
        """Change a runtime schedule (``ScheduleNotFound`` if there is none); what is not given stays."""
        return runtime.update_flow(
            self.kernel,
            name,
            tenant=tenant,
            job=job,
            cron=cron,
            rate=rate,
            at=at,
            timezone=timezone,
            payload=payload,
            overlap=overlap,
            catchup_window=catchup_window,
        )

    def _pause(self, name: str, *, tenant: str | None = None) -> Flow[ScheduleView]:
        """Stop a runtime schedule firing until ``resume``."""
        return runtime.pause_flow(self.kernel, name, tenant=tenant)

    def _resume(self, name: str, *, tenant: str | None = None) -> Flow[ScheduleView]:
        """Fire again, making the fires missed while paused that are within the catch-up window."""
        return runtime.resume_flow(self.kernel, name, tenant=tenant)

    def _delete(self, name: str, *, tenant: str | None = None) -> Flow[bool]:
        """Delete a runtime schedule; False if there was none."""
        return runtime.delete_flow(self.kernel, name, tenant=tenant)

    def _describe(self, name: str, *, tenant: str | None = None, count: int = 3) -> Flow[ScheduleView]:
        """One runtime schedule: its definition, state, last fire (its job and outcome), next fires."""
        return runtime.get_flow(self.kernel, name, tenant=tenant, count=count)

    def _list(self, *, tenant: str | None = None, count: int = 3) -> Flow[list[ScheduleView]]:
        """The runtime schedules of ``tenant`` (all tenants' when None), each as ``get`` shows it."""
        return runtime.list_flow(self.kernel, tenant=tenant, count=count)

    def _declared(self, *, count: int = 3) -> Flow[list[ScheduleView]]:
        """The declared schedules with their last fire and next fires."""
        return runtime.declared_flow(self.kernel, list(self), count=count)

    create, acreate = sync_verb(_create), async_verb(_create)
    update, aupdate = sync_verb(_update), async_verb(_update)
    pause, apause = sync_verb(_pause), async_verb(_pause)
    resume, aresume = sync_verb(_resume), async_verb(_resume)
    delete, adelete = sync_verb(_delete), async_verb(_delete)
    describe, adescribe = sync_verb(_describe), async_verb(_describe)
    list, alist = sync_verb(_list), async_verb(_list)
    declared, adeclared = sync_verb(_declared), async_verb(_declared)
