"""The App's verbs: each is written once, as a flow, and its sync and async forms run that flow.

A pair written twice drifts (one form validates, the other forgets); these hold the rule that
every public verb of the App and of a feature's namespace comes from ``sync_verb``/``async_verb``.
"""

from __future__ import annotations

import asyncio
import inspect

import pytest

from sqsjobs import App
from sqsjobs._aws import Call
from sqsjobs.batches.namespace import Batch, Batches
from sqsjobs.chains.namespace import Chains
from sqsjobs.limits.namespace import FlowControl
from sqsjobs.runtime.kernel import Namespace
from sqsjobs.steps.namespace import Tokens

#: The async twin of a sync verb: ``a`` + its name, and ``await_result`` for ``wait`` (``await`` is a keyword).
SPECIAL_TWINS = {"wait": "await_result"}
#: Verbs that are not one flow run two ways: the outbox's SQL path, and context managers; and the
#: runners themselves (``run``/``arun`` drive every flow, ``close``/``aclose`` close the clients).
HAND_WRITTEN = {"enqueue", "aenqueue", "transaction", "atransaction", "run", "arun", "close", "aclose"}
SURFACES = [App, Chains, Batches, Batch, Tokens, FlowControl]


def twin_name(name: str) -> str:
    return SPECIAL_TWINS.get(name, "a" + name)


def verbs(cls: type) -> dict[str, object]:
    """Public callables defined by the class itself whose twin is a flow method."""
    return {
        name: value
        for name, value in vars(cls).items()
        if not name.startswith("_")
        and name not in HAND_WRITTEN
        and inspect.isfunction(value)
        and hasattr(value, "__wrapped__")
    }


@pytest.mark.parametrize("surface", SURFACES, ids=lambda c: c.__name__)
def test_every_verb_has_a_twin_over_the_same_flow(surface):
    found = verbs(surface)
    sync = {n: v for n, v in found.items() if not inspect.iscoroutinefunction(v)}
    assert sync, f"{surface.__name__} has no verbs"
    for name, verb in sync.items():
        twin = found.get(twin_name(name))
        assert twin is not None, f"{surface.__name__}.{name} has no async twin {twin_name(name)}"
        assert inspect.iscoroutinefunction(twin)
        assert verb.__wrapped__ is twin.__wrapped__, name
        assert verb.__doc__, f"{surface.__name__}.{name} has no docstring"


@pytest.mark.parametrize("surface", SURFACES, ids=lambda c: c.__name__)
def test_no_public_async_method_is_written_by_hand(surface):
    hand = sorted(
        name
        for name, value in vars(surface).items()
        if not name.startswith("_")
        and inspect.iscoroutinefunction(value)
        and not hasattr(value, "__wrapped__")
        and name not in HAND_WRITTEN
    )
    assert hand == []


class Recorder(Namespace):
    """A namespace whose runners record the flow they were given, as the App's clients would run it."""

    def __init__(self) -> None:
        super().__init__(lambda: None)  # type: ignore[arg-type,return-value]
        self.ran: list[tuple[str, object]] = []

    def run(self, flow):
        self.ran.append(("boto3", _drive(flow)))
        return self.ran[-1][1]

    async def arun(self, flow):
        self.ran.append(("aiobotocore", _drive(flow)))
        return self.ran[-1][1]


def _drive(flow):
    """Answer every call with an empty response and return the flow's result."""
    try:
        call = next(flow)
        while True:
            assert isinstance(call, Call)
            call = flow.send({"echo": call.params})
    except StopIteration as stop:
        return stop.value


def test_both_twins_run_the_one_flow_with_the_same_arguments():
    from sqsjobs._aws import async_verb, sync_verb

    class Echo(Recorder):
        def _echo(self, value: int, *, times: int = 1):
            """Echo ``value``."""
            response = yield Call("dynamodb", "get_item", {"value": value * times})
            return response["echo"]["value"]

        echo, aecho = sync_verb(_echo), async_verb(_echo)

    echo = Echo()
    assert echo.echo(2, times=3) == 6
    assert asyncio.run(echo.aecho(2, times=3)) == 6
    assert [how for how, _ in echo.ran] == ["boto3", "aiobotocore"]
    assert Echo.echo.__doc__ == "Echo ``value``." and Echo.aecho.__doc__.startswith("Async: ")
