"""The Lambda functions' code: a zip already built, or one built at synth time by CDK's local bundling.

``LambdaWorker(code_path="build/lambda.zip")`` deploys a zip ``sqsjobs package lambda`` made before
``cdk synth``. ``LambdaWorker(code_path=LocalBundle(app="shop.jobs:app"))`` makes CDK build it during
synthesis instead, through its ``ILocalBundling`` hook: the same ``sqsjobs.deploy.packaging`` build,
run by the Python that runs the CDK app, with no Docker. pip fetches the dependencies' wheels for the
function's runtime and architecture (not this machine's), so a Mac or an x86 CI runner builds an
ARM64 ``python3.12`` zip. The asset is hashed on the zip it produces, so an unchanged App, lock and
dependency set gives an unchanged asset and no redeploy.

CDK calls local bundling first and Docker only when it declines. It never declines here: a build
that fails raises, with pip's or the packager's message, rather than falling back to a container
that would build something else.
"""

from __future__ import annotations

import atexit
import dataclasses
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, BundlingOutput, ILocalBundling
from aws_cdk import aws_lambda as lambda_

from sqsjobs.deploy.packaging import LambdaBuild, build_lambda_zip
from sqsjobs.errors import ConfigurationError

#: ``LambdaWorker.architecture`` → the platform tag ``sqsjobs package lambda --arch`` takes.
ARCHS = {"X86_64": "x86_64", "ARM64": "arm64"}
ZIP_NAME = "function.zip"


@dataclass(frozen=True)
class LocalBundle:
    """Build the deployment zip while synthesizing (``sqsjobs package lambda``'s options, as fields).

    The runtime's Python version and the architecture come from the ``LambdaWorker`` (or ``HttpApi``)
    it is given to, so the zip always matches the function it runs in.
    """

    #: ``module.path:attribute`` of the App; its top-level package goes into the zip.
    app: str
    #: Where the App's package lives (paths below are relative to it). Default: the CDK app's working directory.
    project_dir: str = "."
    #: The App's own requirement specifiers, or ``-r FILE``.
    requirements: tuple[str, ...] = ()
    #: A hashed lock of every package the zip installs (e.g. ``locks/lambda.txt``, made by ``make lock``).
    lock: str | None = None
    #: Extra files or folders put in the zip under the same path.
    include: tuple[str, ...] = ()
    #: The dependency cache (default: the packager's, under the user's cache folder).
    cache_dir: str | None = None
    #: Fail instead of running pip when the dependencies are not cached yet (air-gapped CI).
    offline: bool = False
    #: Bytecode compiled for the runtime beside the sources (faster cold starts).
    bytecode: bool = True

    def build(self, *, runtime: str, architecture: str) -> LambdaBuild:
        """The packager's build for a function of ``runtime`` (``python3.12``) and ``architecture``."""
        if architecture not in ARCHS:
            raise ConfigurationError(f"architecture must be X86_64 or ARM64, got {architecture!r}")
        project = Path(self.project_dir).resolve()
        return LambdaBuild(
            app=self.app,
            output=project / ZIP_NAME,  # replaced by the bundling's output folder
            python_version=runtime.removeprefix("python"),
            arch=ARCHS[architecture],
            requirements=self.requirements,
            lock=Path(self.lock) if self.lock else None,
            include=tuple(Path(i) for i in self.include),
            project_dir=project,
            cache_dir=Path(self.cache_dir) if self.cache_dir else None,
            offline=self.offline,
            bytecode=self.bytecode,
        )


@jsii.implements(ILocalBundling)
class _PackageLocally:
    """CDK's local bundling hook: build the zip once, copy it into each output folder CDK asks for.

    One ``LocalBundle`` feeds several functions (worker, sweeper, API, event relay); they share one
    build instead of packaging the same closure four times.
    """

    #: Shared by every instance: one build per LambdaBuild in this synthesis.
    _built: dict[LambdaBuild, Path] = {}

    def __init__(self, build: LambdaBuild) -> None:
        self._build = build

    def try_bundle(self, output_dir: str, *_: Any, **__: Any) -> bool:
        """Write the zip into ``output_dir``; True, so CDK never starts Docker."""
        built = self._built.get(self._build)
        if built is None or not built.exists():
            scratch = Path(tempfile.mkdtemp(prefix="sqsjobs-cdk-zip-"))
            atexit.register(shutil.rmtree, scratch, ignore_errors=True)
            report = build_lambda_zip(dataclasses.replace(self._build, output=scratch / ZIP_NAME))
            built = self._built[self._build] = report.path
        shutil.copyfile(built, Path(output_dir) / ZIP_NAME)
        return True


def lambda_code(code_path: str | LocalBundle, *, runtime: str, architecture: str) -> lambda_.Code:
    """The function's code: the zip or folder at ``code_path``, or a ``LocalBundle`` built at synth time."""
    if isinstance(code_path, LocalBundle):
        build = code_path.build(runtime=runtime, architecture=architecture)
        return lambda_.Code.from_asset(
            str(build.project_dir),
            # The zip's hash, not the project folder's (which holds virtualenvs and caches).
            asset_hash_type=AssetHashType.OUTPUT,
            bundling=BundlingOptions(
                # Required by CDK, used only if local bundling declines, which it never does.
                image=lambda_.Runtime(runtime, lambda_.RuntimeFamily.PYTHON).bundling_image,
                command=[
                    "sh",
                    "-c",
                    "echo 'sqsjobs bundles locally (LocalBundle); Docker is not used' >&2; exit 1",
                ],
                local=_PackageLocally(build),
                output_type=BundlingOutput.ARCHIVED,
            ),
        )
    code = Path(code_path)
    if not code.exists():
        raise ConfigurationError(f"Lambda code {code} does not exist; build the deployment package first")
    return lambda_.Code.from_asset(str(code))
