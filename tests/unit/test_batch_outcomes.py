"""A batch handler's answer, matched to its jobs as the worker matches it (``sqsjobs.testing.run_job`` runs a call of one).

No job may be taken as done without an outcome of its own: a missing, extra or malformed answer is
a ``BatchOutcomeError`` (retried by the type's policy), never a success.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from sqsjobs import (
    App,
    BatchDead,
    BatchItem,
    BatchOptions,
    BatchOutcomeError,
    BatchRetry,
    BatchSuccess,
    ConfigurationError,
    PayloadInvalid,
    PermanentError,
    Retry,
)
from sqsjobs.testing import run_job


class Doc(BaseModel):
    text: str


@pytest.fixture
def app() -> App:
    app = App("batch-outcomes")
    answers: dict[str, Any] = {}

    @app.job("list", batch=BatchOptions(max_size=5), max_attempts=3)
    def by_order(items: list[BatchItem[Doc]]) -> Any:
        assert all(isinstance(i.payload, Doc) for i in items)  # validated as a single handler's payload
        return answers["answer"](items)

    @app.job("async", batch=BatchOptions(max_size=5))
    async def by_id(items: list[BatchItem[Doc]]) -> Any:
        return answers["answer"](items)

    app.answers = answers  # type: ignore[attr-defined]
    return app


def run(app: App, job_type: str, answer: Any, *, attempt: int = 1) -> Any:
    app.answers["answer"] = answer  # type: ignore[attr-defined]
    return run_job(app, job_type, {"text": "hello"}, attempt=attempt)


@pytest.mark.parametrize("job_type", ["list", "async"])
def test_each_outcome_becomes_its_jobs_end(app, job_type):
    assert run(app, job_type, lambda items: [BatchSuccess({"n": 1})]).result == {"n": 1}
    assert run(app, job_type, lambda items: {items[0].job_id: BatchSuccess(2)}).result == 2
    retried = run(app, job_type, lambda items: [BatchRetry("rate limited", delay_s=7)])
    assert (retried.outcome, retried.delay_s, type(retried.error)) == ("retry", 7, Retry)
    dead = run(app, job_type, lambda items: [BatchDead("poison")])
    assert (dead.outcome, type(dead.error), str(dead.error)) == ("dead", PermanentError, "poison")
    raised = run(app, job_type, lambda items: [ValueError("one bad row")])
    assert (raised.outcome, type(raised.error)) == ("retry", ValueError)


@pytest.mark.parametrize(
    "answer",
    [
        lambda items: [],  # missing
        lambda items: [BatchSuccess(), BatchSuccess()],  # extra
        lambda items: {},  # no outcome for the job
        lambda items: {
            items[0].job_id: BatchSuccess(),
            "another-job": BatchSuccess(),
        },  # a job not in the call
        lambda items: None,
        lambda items: "ok",
        lambda items: [True],  # not an outcome
    ],
)
def test_an_answer_that_gives_a_job_no_outcome_retries_it_and_never_succeeds_it(app, answer):
    result = run(app, "list", answer)
    assert (result.outcome, type(result.error)) == ("retry", BatchOutcomeError)
    assert run(app, "list", answer, attempt=3).outcome == "dead"  # the type's policy still bounds it


def test_a_call_that_raises_fails_the_attempt_by_the_types_policy(app):
    def boom(items: Any) -> Any:
        raise ConnectionError("embedding API down")

    result = run(app, "list", boom)
    assert (result.outcome, type(result.error)) == ("retry", ConnectionError)


def test_batch_options_refuse_what_cannot_work():
    with pytest.raises(ConfigurationError):
        BatchOptions(max_size=0)
    with pytest.raises(ConfigurationError):
        BatchOptions(max_wait_s=-1)


def test_a_batch_handlers_payload_is_validated_against_its_items_type(app):
    with pytest.raises(PayloadInvalid):
        run_job(app, "list", {"text": 3.5j})
