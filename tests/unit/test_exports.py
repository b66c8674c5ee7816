"""The public surface: ``__all__`` lists exactly the public names, and every error shares one root."""

from __future__ import annotations

import inspect

import sqsjobs
from sqsjobs import errors


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
