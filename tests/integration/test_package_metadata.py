"""Both distributions' wheel metadata, built as a release builds it: what PyPI and pip will show users.

The metadata comes from each project's PEP 517 backend in an isolated environment (the setuptools
a release would use), not from reading pyproject.toml, so a field the backend drops or refuses fails
here. Contributor tooling lives in PEP 735 dependency groups, which must not leak into the metadata
as extras a user could install.
"""

from __future__ import annotations

import tomllib

import pytest
import trove_classifiers
from build.util import project_wheel_metadata
from packaging.requirements import Requirement

from tests.emulators import REPO_ROOT

pytestmark = pytest.mark.slow

PROJECTS = {"sqsjobs": REPO_ROOT, "sqsjobs-cdk": REPO_ROOT / "infra"}


@pytest.fixture(scope="module", params=sorted(PROJECTS))
def built(request):
    name = request.param
    return name, project_wheel_metadata(PROJECTS[name], isolated=True)


def test_the_metadata_names_license_python_keywords_classifiers_and_carries_the_readme(built):
    name, meta = built
    assert meta["Name"] == name
    assert meta["Summary"]
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta["Requires-Python"] == ">=3.11"
    assert meta["Description-Content-Type"] == "text/markdown"
    assert len(meta.get_payload() or meta["Description"] or "") > 500, "the README is the long description"
    assert len((meta["Keywords"] or "").split(",")) >= 5
    classifiers = meta.get_all("Classifier") or []
    assert "Programming Language :: Python :: 3 :: Only" in classifiers
    assert "Development Status :: 3 - Alpha" in classifiers
    unknown = [c for c in classifiers if c not in trove_classifiers.classifiers]
    assert unknown == [], "PyPI refuses an upload with an unknown classifier"
    assert not any(c.startswith("License ::") for c in classifiers), "the SPDX expression says it (PEP 639)"


def test_every_dependency_is_a_range_and_contributor_tools_are_groups_not_extras(built):
    name, meta = built
    requirements = [Requirement(r) for r in meta.get_all("Requires-Dist") or []]
    assert requirements
    pinned = [str(r) for r in requirements if any(s.operator in ("==", "===") for s in r.specifier)]
    assert pinned == [], "a library pins nothing: its users' resolver must have room"
    extras = set(meta.get_all("Provides-Extra") or [])
    assert not extras & {"dev", "test", "lint", "docs"}, extras
    groups = tomllib.loads((PROJECTS[name] / "pyproject.toml").read_text())["dependency-groups"]
    assert {"test", "dev"} <= set(groups)
    assert {"include-group": "test"} in groups["dev"]


def test_the_construct_depends_on_the_library_in_its_minor_series_and_on_cdk_v2():
    meta = project_wheel_metadata(PROJECTS["sqsjobs-cdk"], isolated=True)
    requirements = {Requirement(r).name: Requirement(r) for r in meta.get_all("Requires-Dist") or []}
    library = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert requirements["sqsjobs"].specifier.contains(library)
    assert requirements["aws-cdk-lib"].specifier.contains("2.275.0")
    assert not requirements["aws-cdk-lib"].specifier.contains("3.0.0")
    assert "Framework :: AWS CDK :: 2" in (meta.get_all("Classifier") or [])


def test_the_postgres_extra_is_plain_psycopg_alone(built):
    # An application picks its libpq (psycopg[binary], psycopg[c], the system's) and brings SQLAlchemy
    # only if it uses it: the library's extra forces neither (the construct has no such extra).
    name, meta = built
    postgres = [
        (r.name, sorted(r.extras))
        for r in map(Requirement, meta.get_all("Requires-Dist") or [])
        if r.marker is not None and r.marker.evaluate({"extra": "postgres"})
    ]
    assert postgres == {"sqsjobs": [("psycopg", [])], "sqsjobs-cdk": []}[name]
