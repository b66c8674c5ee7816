"""locks/, what the image and the Lambda zip install, agrees with pyproject.toml and is hashed.

Every requirement of sqsjobs (and of the ``api`` extra both carry) is pinned exactly, at a version
its range accepts, with the sha256 of its files; the Lambda lock holds the zip's runtime
requirements and nothing the zip leaves out (the CLI); the Dockerfile and ``make lambda-zip``
install exactly these files with ``--require-hashes``.
"""

from __future__ import annotations

import re
import tomllib

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from sqsjobs.deploy.packaging import runtime_requirements
from tests.emulators import REPO_ROOT

LOCKS = REPO_ROOT / "locks"
#: What the Lambda runtime's Python looks like to a marker (``sqsjobs package lambda``'s default).
LAMBDA_ENV = {"python_version": "3.12", "python_full_version": "3.12.0", "sys_platform": "linux"}
LAMBDA_ENV |= {"platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython"}
LAMBDA_ENV |= {"platform_python_implementation": "CPython", "os_name": "posix"}


def pins(lock: str, environment: dict[str, str] | None = None) -> dict[str, str]:
    """The lock's pins (for ``environment``'s markers when given), each checked to carry its hashes."""
    text = (LOCKS / lock).read_text()
    found = {}
    for entry in re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 2)[2]):
        first = entry.splitlines()[0]
        requirement, _, marker = first.rstrip(" \\").partition(" ; ")
        name, _, version = requirement.partition("==")
        assert version and re.fullmatch(r"[\w.+-]+", version), f"not an exact pin: {first!r}"
        assert re.search(r"--hash=sha256:[0-9a-f]{64}", entry), f"{name} has no hash in {lock}"
        if environment is None or not marker or Marker(marker).evaluate(environment):
            found[canonicalize_name(name)] = version
    return found


@pytest.mark.parametrize("lock", ["image.txt", "lambda.txt"])
def test_every_requirement_is_pinned_inside_its_range_with_its_hashes(lock):
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    locked = pins(lock)
    wanted = [*project["dependencies"], *project["optional-dependencies"]["api"]]
    if lock == "lambda.txt":
        wanted = runtime_requirements()
    for spec in wanted:
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{name} is not in locks/{lock}"
        assert requirement.specifier.contains(locked[name], prereleases=True), (
            f"locks/{lock} pins {name}=={locked[name]}, outside pyproject's {requirement.specifier}"
        )
    assert "aioboto3" not in locked and "sqsjobs" not in locked


def test_the_lambda_lock_is_the_zips_own_and_resolves_for_its_python():
    image, zipped = pins("image.txt"), pins("lambda.txt", LAMBDA_ENV)
    # the CLI's own packages stay out of the zip; what both carry, they carry at one version
    assert not {"typer", "rich", "uvicorn"} & set(zipped)
    assert {name: v for name, v in zipped.items() if image.get(name) != v} == {}
    assert {"boto3", "aiobotocore", "pydantic", "pydantic-core", "fastapi", "mangum"} <= set(zipped)


def test_the_image_and_the_lambda_zip_install_exactly_the_locks():
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    assert "pip install --require-hashes --no-deps -r /src/image.txt" in dockerfile
    assert "locks/image.txt" in dockerfile.split("COPY pyproject.toml", 1)[1].splitlines()[0]
    assert "!locks/image.txt" in (REPO_ROOT / ".dockerignore").read_text().splitlines()
    assert "--lock locks/lambda.txt" in (REPO_ROOT / "mk" / "lambda.mk").read_text()  # make lambda-zip
