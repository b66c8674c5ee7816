"""The construct as a user gets it: ``pip install`` of the two wheels into a fresh virtualenv, then a CDK app.

Nothing of the source tree may leak in: the app lives in an empty folder outside the repository, runs
with no PYTHONPATH and edits no ``sys.path``, and ``sqsjobs_cdk`` must import from the virtualenv's
site-packages (so must ``sqsjobs``). The wheels install with ``--no-deps`` over the releases of
``.venv-cdk`` (pip's own resolution of the construct's ranges under ``infra/requirements.txt``), and
``pip check`` holds both wheels' declared requirements against them.
"""

from __future__ import annotations

import json
import textwrap
import zipfile
from importlib.metadata import distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.emulators import REPO_ROOT
from tests.infra.conftest import cdk_python
from tests.integration.test_wheel import run
from tests.wheels import pip_into, shared_wheel, venv_without_pip

JOBS = textwrap.dedent(
    """
    from sqsjobs import App

    app = App("mine")


    @app.job("mine.hello", queue="work")
    def hello(payload: dict, ctx: object) -> None: ...
    """
)

#: Where a virtualenv's interpreter installs packages (``lib/python3.X/site-packages``).
PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"

#: The README's deploy section, as a user writes it (its own image folder, no Lambda zip).
DEPLOY = textwrap.dedent(
    """
    import json, sys
    from aws_cdk import App, Stack, Validations, aws_ecs as ecs
    from cdk_nag import AwsSolutionsChecks
    import sqsjobs, sqsjobs_cdk
    from sqsjobs_cdk import FargateWorker, SqsJobs

    from jobs import app as jobs

    cdk_app = App(outdir="cdk.out")
    stack = Stack(cdk_app, "Mine")
    SqsJobs(stack, "Jobs", app=jobs, fargate=FargateWorker(image=ecs.ContainerImage.from_asset("image")))
    Validations.of(cdk_app).add_plugins(AwsSolutionsChecks(cdk_app))
    cdk_app.synth()
    print(json.dumps({"construct": sqsjobs_cdk.__file__, "library": sqsjobs.__file__, "path": sys.path}))
    """
)


@pytest.mark.slow
@pytest.mark.timeout(600)  # a wheel build (the library's is shared with test_wheel.py) and a synth
def test_the_construct_installs_with_pip_and_synthesizes_an_app_with_no_sys_path_edit(
    tmp_path, tmp_path_factory
):
    # GIVEN the library's wheel and the construct's, built as a release builds them
    library = shared_wheel(tmp_path_factory, REPO_ROOT, "sqsjobs")
    construct = shared_wheel(tmp_path_factory, REPO_ROOT / "infra", "sqsjobs_cdk")
    with zipfile.ZipFile(construct) as archive:
        names = archive.namelist()
        (metadata,) = (n for n in names if n.endswith(".dist-info/METADATA"))
        requires = [
            line.split(":", 1)[1].strip()
            for line in archive.read(metadata).decode().splitlines()
            if line.startswith("Requires-Dist:")
        ]
    assert {n.split("/")[0] for n in names} == {"sqsjobs_cdk", construct.name.split("-py3")[0] + ".dist-info"}
    assert "sqsjobs_cdk/construct.py" in names
    cdk = next(r for r in requires if r.startswith("aws-cdk-lib"))
    assert ">=" in cdk and "<" in cdk and "==" not in cdk, requires

    # WHEN both are installed with pip into a fresh virtualenv whose third-party dependencies are the
    # CDK virtualenv's: a .pth line puts its site-packages after the new one's (its own .pth files,
    # the editable sqsjobs among them, are not read: only a site directory's are). Installing the
    # ~460 MB of CDK again cost half a minute of CPU and proved nothing more: that venv is pip's own
    # resolution of the construct's ranges under infra/requirements.txt (the Makefile installs it with
    # `-r infra/requirements.txt -e './infra[nag]'`); the library's dependencies from the index are
    # test_wheel.py's.
    cdk_site_packages = Path(run([cdk_python(), "-c", PURELIB], cwd=tmp_path).stdout.strip()).resolve()
    venv = tmp_path / "venv"
    python = venv_without_pip(venv)
    own_site = Path(run([python, "-c", PURELIB], cwd=tmp_path).stdout.strip())
    assert own_site.name == cdk_site_packages.name and own_site.parent.name == cdk_site_packages.parent.name
    (own_site / "cdk-dependencies.pth").write_text(f"{cdk_site_packages}\n")
    # --no-compile: bytecode nobody imports is CPU the suite does not need to spend
    run(pip_into(python, "install", "--no-deps", "--no-compile", "-q", library, construct), cwd=tmp_path)
    # ... and every requirement the construct declares (with its nag extra) holds in that environment
    present: dict[str, str] = {}
    for dist in distributions(path=[str(own_site), str(cdk_site_packages)]):  # the venv's sys.path order
        present.setdefault(canonicalize_name(dist.metadata["Name"]), dist.version)
    for line in requires:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": "nag"}):
            version = present.get(canonicalize_name(requirement.name))
            assert version is not None and requirement.specifier.contains(version, prereleases=True), (
                requirement,
                version,
            )

    # AND a CDK app in a folder of its own synthesizes the README's example
    project = tmp_path / "project"
    (project / "image").mkdir(parents=True)
    (project / "image" / "Dockerfile").write_text("FROM scratch\n")
    (project / "jobs.py").write_text(JOBS)
    (project / "deploy.py").write_text(DEPLOY)
    env_extra = ["env", "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20", "CDK_VALIDATION=false"]
    shown = run([*env_extra, venv / "bin" / "python", "deploy.py"], cwd=project, timeout=240).stdout

    # THEN the construct came from the virtualenv, not from the repository
    found = json.loads(shown.strip().splitlines()[-1])
    assert found["construct"].startswith(str(venv)), found
    assert found["library"].startswith(str(venv)), found
    # (the CDK's site-packages sits in the repository's .venv-cdk on a fresh clone: only that entry)
    assert not [p for p in found["path"] if str(REPO_ROOT) in p and Path(p).resolve() != cdk_site_packages], (
        found
    )

    # AND the template holds the App's table and its queue
    template = json.loads((project / "cdk.out" / "Mine.template.json").read_text())
    kinds = [r["Type"] for r in template["Resources"].values()]
    assert kinds.count("AWS::DynamoDB::Table") == 1
    assert "AWS::ECS::Service" in kinds and "AWS::SQS::Queue" in kinds
