"""The public surface: ``__all__`` lists exactly the public names, and every error shares one root."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import sqsjobs
from sqsjobs import errors
from sqsjobs.job import FailureRecord


def test_all_is_complete_and_resolvable():
    public = {
        name
        for name in dir(sqsjobs)
        if not name.startswith("_") and name != "annotations" and not inspect.ismodule(getattr(sqsjobs, name))
    }
    assert public == set(sqsjobs.__all__)


def test_every_error_derives_from_the_root_and_has_a_default_message():
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, Exception)]
    assert all(issubclass(c, errors.SqsJobsError) for c in classes)
    assert all(str(c()) for c in classes if c is not errors.SqsJobsError)


def _sqsjobs_modules():
    # ``__main__`` runs the CLI when imported; every other module imports without side effects.
    names = [
        m.name for m in pkgutil.walk_packages(sqsjobs.__path__, "sqsjobs.") if m.name != "sqsjobs.__main__"
    ]
    return [importlib.import_module(name) for name in names]


def test_every_exception_class_of_the_package_is_defined_in_errors_under_the_root():
    # GIVEN every module of the package, imported
    modules = _sqsjobs_modules()
    # WHEN we collect the exception classes each one defines or re-exports
    found = {
        (module.__name__, name, cls)
        for module in modules
        for name, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, BaseException) and cls.__module__.startswith("sqsjobs")
    }
    # THEN each is defined in sqsjobs.errors (re-exports elsewhere are fine) and shares the root
    assert found, "the walk found no exception at all"
    misplaced = sorted(
        f"{module}.{name}" for module, name, cls in found if cls.__module__ != "sqsjobs.errors"
    )
    assert misplaced == []
    assert all(issubclass(cls, errors.SqsJobsError) for _, _, cls in found)


def test_refusals_are_apart_from_aws_failures():
    # GIVEN the domain refusals of the job record
    refusals = (errors.JobNotFound, errors.LeaseLost, errors.IdempotencyConflict, errors.InvalidTransition)
    # THEN none is an AWS failure: `except StoreError` / `except AwsError` never swallows one
    assert all(issubclass(r, errors.JobStateError) for r in refusals)
    assert not any(issubclass(r, errors.AwsError) for r in refusals)


def test_moved_exceptions_still_import_from_their_old_homes():
    # (The runtime's old homes of JobTimeout, InvalidBatchResponse and InvalidEvent are gone: 0.1.0
    # was never released. They import from sqsjobs.errors, or from sqsjobs.)
    from sqsjobs.ops.inspect import CursorError
    from sqsjobs.schedules.expressions import ExpressionError

    assert (CursorError, ExpressionError) == (errors.CursorError, errors.ExpressionError)
    # Input errors stay ValueErrors for callers that validate with `except ValueError`.
    assert issubclass(errors.CursorError, ValueError) and issubclass(errors.ExpressionError, ValueError)


@pytest.mark.parametrize("module", ["sqsjobs", "sqsjobs.job"])
def test_the_old_name_of_failure_record_still_works_with_a_deprecation_warning(module):
    # GIVEN code written against the old name JobError
    mod = importlib.import_module(module)
    # WHEN it reads it
    with pytest.warns(DeprecationWarning, match="JobError is renamed FailureRecord"):
        old = mod.JobError
    # THEN it gets the record class under its new name, and nothing else resolves by accident
    assert old is FailureRecord
    assert "JobError" not in dir(mod) and "JobError" not in getattr(mod, "__all__", ())
    with pytest.raises(AttributeError):
        _ = mod.NoSuchName
