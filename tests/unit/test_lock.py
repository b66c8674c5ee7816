"""constraints.txt, the lock the image and the Lambda zip build from, agrees with pyproject.toml.

Every requirement of sqsjobs (and of the ``api`` extra the zip carries) is pinned exactly, at a
version its range accepts; the Dockerfile and ``make lambda-zip`` build with it.
"""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.emulators import REPO_ROOT


def pins() -> dict[str, str]:
    found = {}
    for line in (REPO_ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version and re.fullmatch(r"[\w.+-]+", version), f"not an exact pin: {line!r}"
            found[canonicalize_name(name)] = version
    return found


def test_every_requirement_is_pinned_inside_its_range():
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    locked = pins()
    for spec in [*project["dependencies"], *project["optional-dependencies"]["api"]]:
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{name} is not in constraints.txt"
        assert requirement.specifier.contains(locked[name], prereleases=True), (
            f"constraints.txt pins {name}=={locked[name]}, outside pyproject's {requirement.specifier}"
        )
    assert "aioboto3" not in locked


def test_the_image_and_the_lambda_zip_build_from_it():
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    assert "pip install -c /src/constraints.txt /src" in dockerfile
    assert "constraints.txt" in dockerfile.split("COPY pyproject.toml", 1)[1].splitlines()[0]
    assert "!constraints.txt" in (REPO_ROOT / ".dockerignore").read_text().splitlines()
    assert "--constraint constraints.txt" in (REPO_ROOT / "mk" / "lambda.mk").read_text()
