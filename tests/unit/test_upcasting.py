"""Payload versioning: ``@job(version=PayloadVersion(N, upcast={...}))`` is checked at import, and an older payload is
upgraded step by step before validation (``HandlerSpec.load``, what the worker and ``run_job`` apply)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from sqsjobs import App, ConfigurationError, PayloadInvalid, PayloadVersion, Registry, UpcastError
from sqsjobs.testing import run_job


class Profile(BaseModel):
    """Version 3: the name split in two, and an email list instead of one address."""

    first: str
    last: str
    emails: list[str]


def v1_to_v2(p: dict[str, Any]) -> dict[str, Any]:
    first, _, last = p.pop("name").partition(" ")  # mutates its argument on purpose (see below)
    p.update(first=first, last=last)
    return p


def v2_to_v3(p: dict[str, Any]) -> dict[str, Any]:
    return {"first": p["first"], "last": p["last"], "emails": [p["email"]]}


def handle(payload: Profile, ctx: Any) -> dict[str, Any]:
    return payload.model_dump()


@pytest.fixture
def app() -> App:
    app = App("unit-upcast")
    app.job("profile.update", version=PayloadVersion(3, upcast={1: v1_to_v2, 2: v2_to_v3}))(handle)
    return app


V1 = {"name": "Ada Lovelace", "email": "ada@example.com"}
V3 = {"first": "Ada", "last": "Lovelace", "emails": ["ada@example.com"]}


# ── declared at import ───────────────────────────────────────────────────────────────────────
def test_a_missing_step_is_an_error_at_import_naming_the_step():
    registry = Registry()
    with pytest.raises(ConfigurationError, match=r"'x' \(version 3\): upcast lacks the step 2→3"):

        @registry.job("x", version=PayloadVersion(3, upcast={1: v1_to_v2}))
        def x(payload: Any, ctx: Any) -> None: ...

    assert "x" not in registry


@pytest.mark.parametrize(
    ("upcast", "match"),
    [
        ({0: v1_to_v2, 1: v1_to_v2, 2: v2_to_v3}, "upcast key 0 is not a version from 1 to 2"),
        ({1: v1_to_v2, 2: v2_to_v3, 3: v2_to_v3}, "upcast key 3 is not a version from 1 to 2"),
        ({"1": v1_to_v2, 2: v2_to_v3}, "upcast key '1' is not a version"),
        ({True: v1_to_v2, 2: v2_to_v3}, "upcast key True is not a version"),
        ({1: "v1_to_v2", 2: v2_to_v3}, r"upcast\[1\] is not callable"),
        ({1: v1_to_v2}, "lacks the step 2→3"),
    ],
)
def test_keys_are_versions_1_to_version_minus_1_and_values_callables(upcast, match):
    with pytest.raises(ConfigurationError, match=match):
        Registry().job("x", version=PayloadVersion(3, upcast=upcast))


def test_steps_may_start_above_1_which_retires_the_older_versions():
    registry = Registry()
    registry.job("x", version=PayloadVersion(3, upcast={2: v2_to_v3}))(handle)
    spec = registry.get("x")
    assert dict(spec.upcasts) == {2: v2_to_v3}

    with pytest.raises(UpcastError, match="older than its oldest upcast step") as caught:
        spec.load(V1, 1)
    assert caught.value.reason == "no upcast from version 1"


def test_a_spec_with_upcasts_is_still_hashable_as_specs_were(app):
    spec = app.registry.get("profile.update")
    assert {spec: 1}[spec] == 1


def test_an_included_registry_keeps_its_upcasts(app):
    outer = Registry()
    outer.include(app.registry, prefix="crm.")
    assert outer.get("crm.profile.update").load(V1, 1) == Profile(**V3)


# ── upgrading ────────────────────────────────────────────────────────────────────────────────
def test_an_older_payload_is_upgraded_step_by_step_then_validated(app):
    spec = app.registry.get("profile.update")
    v2 = {"first": "Ada", "last": "Lovelace", "email": "ada@example.com"}

    assert spec.load(V1, 1) == Profile(**V3)
    assert spec.load(v2, 2) == Profile(**V3)  # only the 2→3 step
    assert spec.load(V3, 3) == Profile(**V3)  # current: validated as it is


def test_the_steps_never_change_the_stored_payload(app):
    # GIVEN a step that mutates its argument in place (v1_to_v2 pops "name")
    stored = {"name": "Ada Lovelace", "email": "ada@example.com"}
    app.registry.get("profile.update").load(stored, 1)
    # THEN the job's payload is still the one enqueued: a record written from it later (dead, held)
    # keeps a version-1 payload under its version-1 label
    assert stored == V1


def test_without_upcasts_an_older_payload_is_validated_as_it_is():
    app = App("unit-no-upcast")
    app.job("profile.update", version=3)(handle)
    spec = app.registry.get("profile.update")
    assert spec.load(V3, 1) == Profile(**V3)
    with pytest.raises(PayloadInvalid, match="does not validate") as caught:
        spec.load(V1, 1)
    assert caught.value.reason == "payload failed validation"
    assert not isinstance(caught.value, UpcastError)


def test_a_step_that_raises_is_a_payload_error_naming_the_step(app):
    spec = app.registry.get("profile.update")
    with pytest.raises(
        UpcastError, match=r"upcast 2→3 of 'profile.update' failed: KeyError: 'email'"
    ) as caught:
        spec.load({"name": "Ada Lovelace"}, 1)
    assert caught.value.reason == "payload upcast 2→3 failed"
    assert isinstance(caught.value.__cause__, KeyError)


def test_an_upgraded_payload_that_does_not_validate_says_it_was_upgraded(app):
    spec = app.registry.get("profile.update")
    with pytest.raises(PayloadInvalid, match=r"emails.0: .*\(after upcasting it from version 1\)") as caught:
        spec.load({"name": "Ada Lovelace", "email": 7}, 1)
    assert caught.value.reason == "payload failed validation"


# ── run_job applies the same rules ───────────────────────────────────────────────────────────
def test_run_job_runs_an_older_payload_as_a_worker_would(app):
    result = run_job(app, "profile.update", V1, payload_version=1)
    assert (result.outcome, result.result) == ("succeeded", V3)
    assert (result.job.payload, result.job.payload_version) == (V1, 1)  # the job keeps what was enqueued

    with pytest.raises(UpcastError, match="upcast 2→3"):
        run_job(app, "profile.update", {"name": "Ada"}, payload_version=1)
    with pytest.raises(ValueError, match=r"payload_version must be 1..3"):
        run_job(app, "profile.update", V3, payload_version=4)
    assert run_job(app, handle, Profile(**V3)).result == V3  # the current version, as before
