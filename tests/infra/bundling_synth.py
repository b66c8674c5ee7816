"""Run by the CDK virtualenv's Python: the example App's Lambda worker with its zip built at synth time.

``python tests/infra/bundling_synth.py OUTDIR PYTHON_VERSION ARCHITECTURE`` synthesizes one stack whose
worker, sweeper and API functions get ``LocalBundle(app="examples.shop:app")`` (offline, from the
dependency cache the other infra tests use) into OUTDIR.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# This checkout's sqsjobs and construct, not whatever the CDK virtualenv has installed.
for path in (str(REPO / "infra"), str(REPO)):
    if path not in sys.path:
        sys.path.insert(0, path)

import aws_cdk as cdk  # noqa: E402
from sqsjobs_cdk import HttpApi, LambdaWorker, LocalBundle, SqsJobs, Sweeper  # noqa: E402

from examples.shop import app as shop  # noqa: E402
from sqsjobs.deploy.rules import LAMBDA_VISIBILITY_FACTOR, lambda_timeout_s, queues_of  # noqa: E402


def main(outdir: Path, python_version: str, architecture: str) -> None:
    cdk_app = cdk.App(outdir=str(outdir))
    stack = cdk.Stack(cdk_app, "Bundled")
    # As infra/app.py does: every queue hides a batch for 6x the function's timeout.
    timeout = lambda_timeout_s(shop.registry, queues_of(shop.registry))
    shop.configure(
        visibility_timeout_s=max(shop.settings.visibility_timeout_s, LAMBDA_VISIBILITY_FACTOR * timeout)
    )
    bundle = LocalBundle(app="examples.shop:app", project_dir=str(REPO), offline=True)
    SqsJobs(
        stack,
        "Jobs",
        app=shop,
        app_path="examples.shop:app",
        lambda_worker=LambdaWorker(
            code_path=bundle, runtime=f"python{python_version}", architecture=architecture
        ),
        api=HttpApi(runtime=f"python{python_version}", architecture=architecture),
        sweeper=Sweeper(),
    )
    cdk_app.synth()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3])
