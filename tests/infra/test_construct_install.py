"""The construct as a user gets it: ``pip install`` of the two wheels into a fresh virtualenv, then a CDK app.

Nothing of the source tree may leak in: the app lives in an empty folder outside the repository, runs
with no PYTHONPATH and edits no ``sys.path``, and ``sqsjobs_cdk`` must import from the virtualenv's
site-packages. Dependencies come from the package index, held to ``infra/requirements.txt`` (the lock
of the ranges in ``infra/pyproject.toml``) so the install hits the same releases as ``.venv-cdk``.
"""

from __future__ import annotations

import json
import sys
import textwrap
import zipfile

import pytest

from tests.emulators import REPO_ROOT
from tests.integration.test_wheel import run

JOBS = textwrap.dedent(
    """
    from sqsjobs import App

    app = App("mine")


    @app.job("mine.hello", queue="work")
    def hello(payload: dict, ctx: object) -> None: ...
    """
)

#: The README's deploy section, as a user writes it (its own image folder, no Lambda zip).
DEPLOY = textwrap.dedent(
    """
    import json, sys
    from aws_cdk import App, Stack, Validations, aws_ecs as ecs
    from cdk_nag import AwsSolutionsChecks
    import sqsjobs_cdk
    from sqsjobs_cdk import FargateWorker, SqsJobs

    from jobs import app as jobs

    cdk_app = App(outdir="cdk.out")
    stack = Stack(cdk_app, "Mine")
    SqsJobs(stack, "Jobs", app=jobs, fargate=FargateWorker(image=ecs.ContainerImage.from_asset("image")))
    Validations.of(cdk_app).add_plugins(AwsSolutionsChecks(cdk_app))
    cdk_app.synth()
    print(json.dumps({"construct": sqsjobs_cdk.__file__, "path": sys.path}))
    """
)


@pytest.mark.slow
@pytest.mark.timeout(600)  # two wheel builds, ~460 MB of CDK installed, a synth: ~2.5 min here
def test_the_construct_installs_with_pip_and_synthesizes_an_app_with_no_sys_path_edit(tmp_path):
    # GIVEN the library's wheel and the construct's, built as a release builds them
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--wheel", "--outdir", dist], cwd=REPO_ROOT, timeout=180)
    run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", dist, REPO_ROOT / "infra"],
        cwd=REPO_ROOT,
        timeout=180,
    )
    (library,) = dist.glob("sqsjobs-*-py3-none-any.whl")
    (construct,) = dist.glob("sqsjobs_cdk-*-py3-none-any.whl")
    # the construct's wheel holds the construct package alone, asking for ranges
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

    # WHEN both are installed with pip into a fresh virtualenv (cdk-nag through the construct's extra)
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=tmp_path)
    run(
        [
            venv / "bin" / "python",
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-compile",  # bytecode for ~460 MB nobody imports: CPU the suite does not need to spend
            "-q",
            "-c",
            REPO_ROOT / "infra" / "requirements.txt",
            library,
            f"{construct}[nag]",
        ],
        cwd=tmp_path,
        timeout=300,
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
    assert not any(str(REPO_ROOT) in p for p in found["path"]), found["path"]
    # AND the template holds the App's table and its queue
    template = json.loads((project / "cdk.out" / "Mine.template.json").read_text())
    kinds = [r["Type"] for r in template["Resources"].values()]
    assert kinds.count("AWS::DynamoDB::Table") == 1
    assert "AWS::ECS::Service" in kinds and "AWS::SQS::Queue" in kinds
