"""Build a Lambda deployment zip from the project: dependencies, sqsjobs, the user's app, the entry point.

Layout of the zip (everything at the root, which Lambda puts first on ``sys.path``)::

    sqsjobs/                    this package's source; the handler is sqsjobs.runtime.lambda_handlers.sqs_worker
                                (the HTTP API's: sqsjobs.api.lambda_handler.handler)
    <app package>/              the top-level package (or module) named by --app
    lambda_handlers/            the project's own entry points, if it has that folder
    boto3/ botocore/ aiobotocore/ pydantic/ ...   sqsjobs' runtime requirements
    **/__pycache__/*.cpython-3XX.pyc                 bytecode for the function's Python (deploy/bytecode.py)
    fastapi/ starlette/ mangum/ ...                          the api extra's, less the local server

Dependencies are installed with ``pip install --target`` for the Lambda runtime's Python and
architecture (``--platform manylinux2014_<arch> --only-binary=:all:``), so the zip is right for
Lambda whatever machine builds it. They are cached per (requirements, Python, platform) under
``build/lambda/deps-<hash>``: a second build only zips.

boto3 and botocore are bundled even though the Lambda runtime provides boto3: aiobotocore pins
botocore to a narrow range, and the runtime's botocore (whatever version AWS ships that month)
would not match it. Bundling also makes the zip run on emulators that provide no boto3 at all
(MiniStack runs functions on its own interpreter, without boto3; see EMULATORS.md). The CLI-only
requirements (typer, rich) are left out. The ``api`` extra's requirements go in, less uvicorn (only
``sqsjobs api`` serves with it): one zip runs both the worker and the API function (infra/).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from sqsjobs._aws import SERVICES
from sqsjobs.deploy import bytecode
from sqsjobs.errors import ConfigurationError
from sqsjobs.runtime.lambda_handlers import SQS_WORKER_HANDLER

#: The handler string for functions built by ``build_lambda_zip``.
HANDLER = SQS_WORKER_HANDLER
#: Default target: the newest Lambda Python runtime this release is tested for.
DEFAULT_PYTHON = "3.12"
#: Lambda architectures → the manylinux platform tag pip installs wheels for.
#: https://docs.aws.amazon.com/lambda/latest/dg/python-package.html
PLATFORMS = {"x86_64": "manylinux2014_x86_64", "arm64": "manylinux2014_aarch64"}
#: Direct-upload limit for a zip (larger ones must go through S3), and the unzipped limit.
#: https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html
MAX_DIRECT_UPLOAD_BYTES = 50 * 1024 * 1024
MAX_UNZIPPED_BYTES = 250 * 1024 * 1024
#: sqsjobs requirements only the CLI imports.
CLI_ONLY = frozenset({"typer", "rich"})
#: Extras whose requirements the zip carries (the API function runs from the same zip as the worker),
#: and what of them only a local process needs.
LAMBDA_EXTRAS = frozenset({"api"})
SERVER_ONLY = frozenset({"uvicorn"})
#: The AWS services whose botocore data a slim zip keeps (``LambdaBuild.aws_services``): the ones
#: sqsjobs calls, and STS, which botocore's credential providers may call for an assumed role.
SQSJOBS_SERVICES = frozenset({*SERVICES, "sts"})
#: Where botocore keeps one directory of JSON per service (27 MB of the zip unzipped, for 400+).
_BOTOCORE_DATA = "botocore/data/"
#: Never shipped: caches and the console scripts pip puts in ``--target``/bin.
_SKIP_DIRS = frozenset({"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"})
_SKIP_TOP = frozenset({"bin"})
#: Fixed timestamp for every entry, so the same inputs give the same zip (and the same code hash).
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class LambdaBuild:
    """What to build."""

    #: ``module.path:attribute`` of the App (its top-level package goes into the zip).
    app: str
    output: Path
    python_version: str = DEFAULT_PYTHON
    arch: str = "x86_64"
    #: Extra requirement specifiers or ``-r file`` arguments for the app's own dependencies.
    requirements: tuple[str, ...] = ()
    #: A hashed lock (relative to ``project_dir``): every package the zip installs, pinned with its
    #: hashes (``uv pip compile --generate-hashes``; this repository's is ``locks/lambda.txt``, made by
    #: ``make lock``). pip installs exactly it (``--require-hashes --no-deps``), sqsjobs' own ranges
    #: unread, so a file changed on the index, or a package the lock does not name, fails the build;
    #: the ``requirements`` files must be hashed too. None: sqsjobs' requirements, newest in range.
    lock: Path | None = None
    #: Extra files or directories, relative to ``project_dir``, put in the zip under the same path.
    include: tuple[Path, ...] = ()
    project_dir: Path = field(default_factory=Path.cwd)
    cache_dir: Path | None = None
    #: Fail instead of running pip when the dependencies are not cached yet (tests, air-gapped CI).
    offline: bool = False
    #: zlib level; 1 builds fast, 9 uploads smallest.
    compress_level: int = 6
    #: Put bytecode compiled for ``python_version`` beside the sources (``deploy/bytecode.py``): a
    #: cold start then imports instead of compiling. False: sources only.
    bytecode: bool = True
    #: Keep botocore's data only for these services and sqsjobs' own (``SQSJOBS_SERVICES``); None
    #: keeps all of it. The app's own handlers calling another service (SES, SNS...) name it here:
    #: a client for a service whose data is gone fails with botocore's ``UnknownServiceError``.
    aws_services: frozenset[str] | None = None


@dataclass(frozen=True)
class BuildReport:
    """What was built."""

    path: Path
    size_bytes: int
    unzipped_bytes: int
    files: int
    handler: str
    deps_dir: Path
    warnings: tuple[str, ...] = ()


def runtime_requirements() -> list[str]:
    """What the zip installs, from sqsjobs' installed metadata: its requirements and the ``api`` extra's.

    Left out: the CLI-only ones, uvicorn, and every other extra. The ``extra ==`` marker is dropped
    from what is kept, so pip installs it without being asked for the extra.
    """
    out = []
    for spec in importlib.metadata.requires("sqsjobs") or []:
        requirement, _, marker = spec.partition(";")
        extra = re.search(r"""extra\s*==\s*["']([\w.-]+)["']""", marker)
        if "extra" in marker and (extra is None or extra.group(1) not in LAMBDA_EXTRAS):
            continue
        name = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
        if name and name.group(0).lower() in CLI_ONLY | SERVER_ONLY:
            continue
        if name and name.group(0).lower() == "sqsjobs":
            continue  # a self-reference between extras
        out.append(requirement.strip() if extra else spec.strip())
    return sorted(out)


def deps_dir_for(build: LambdaBuild) -> Path:
    """The cache directory for this build's dependencies (same inputs, same directory)."""
    if build.arch not in PLATFORMS:
        raise ConfigurationError(f"--arch must be one of {', '.join(PLATFORMS)}, got {build.arch!r}")
    if not re.fullmatch(r"3\.\d+", build.python_version):
        raise ConfigurationError(f"--python-version must look like 3.12, got {build.python_version!r}")
    key = {
        "requirements": runtime_requirements() + sorted(build.requirements),
        "files": {r: _digest_file(build.project_dir, r) for r in build.requirements},
        **({"lock": _digest_file(build.project_dir, f"-r{build.lock}")} if build.lock else {}),
        "python": build.python_version,
        "platform": PLATFORMS[build.arch],
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    cache = build.cache_dir or build.project_dir / "build" / "lambda"
    return cache / f"deps-py{build.python_version}-{build.arch}-{digest}"


def _digest_file(project_dir: Path, requirement: str) -> str:
    """A requirements file's content hash, so editing it invalidates the cache."""
    if not requirement.startswith("-r"):
        return ""
    path = project_dir / requirement[2:].strip()
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""


def install_deps(build: LambdaBuild) -> Path:
    """Install (or reuse) the dependencies for the target runtime; returns their directory."""
    target = deps_dir_for(build)
    if (target / ".complete").exists():
        return target
    if build.offline:
        raise ConfigurationError(
            f"dependencies for Python {build.python_version}/{build.arch} are not cached in {target}; "
            "build them once with network access (`make lambda-zip`, or without --offline)"
        )
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    extra: list[str] = (
        ["--require-hashes", "--no-deps", "-r", str(build.project_dir / build.lock)] if build.lock else []
    )
    for r in build.requirements:
        extra += ["-r", str(build.project_dir / r[2:].strip())] if r.startswith("-r") else [r]
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-compile",
        "--target",
        str(partial),
        "--implementation",
        "cp",
        "--python-version",
        build.python_version,
        "--platform",
        PLATFORMS[build.arch],
        "--only-binary=:all:",
        *([] if build.lock else runtime_requirements()),  # the lock holds them, pinned and hashed
        *extra,
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise ConfigurationError(
            f"pip could not install the Lambda dependencies:\n{result.stderr.strip()[-2000:]}"
        )
    (partial / ".complete").write_text(" ".join(command) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    for stale in target.parent.glob(f"deps-py{build.python_version}-{build.arch}-*"):
        if stale != target and not stale.name.endswith(".partial"):
            shutil.rmtree(stale, ignore_errors=True)  # older requirements for the same runtime
    return target


def _app_sources(build: LambdaBuild) -> list[tuple[Path, str]]:
    """The files of the app's top-level package (or module), as (path, name in the zip)."""
    module, _, attr = build.app.partition(":")
    if not module or not attr:
        raise ConfigurationError(f"expected an app path like 'shop.jobs:app', got {build.app!r}")
    top = module.split(".")[0]
    sys.path.insert(0, str(build.project_dir))
    try:
        spec = importlib.util.find_spec(top)
    finally:
        sys.path.remove(str(build.project_dir))
    if spec is None:
        raise ConfigurationError(f"cannot find module {top!r} for --app {build.app} from {build.project_dir}")
    if spec.submodule_search_locations:
        files: list[tuple[Path, str]] = []
        for location in spec.submodule_search_locations:
            files += _tree(Path(location), top)
        return files
    if spec.origin is None:
        raise ConfigurationError(f"module {top!r} has no source file to package")
    origin = Path(spec.origin)
    return [(origin, origin.name)]


def _tree(root: Path, prefix: str) -> list[tuple[Path, str]]:
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")):
                continue
            path = Path(dirpath) / name
            files.append((path, f"{prefix}/{path.relative_to(root).as_posix()}".lstrip("/")))
    return files


def build_lambda_zip(build: LambdaBuild) -> BuildReport:
    """Install or reuse the dependencies, then write the zip; see the module docstring for its layout."""
    import sqsjobs

    deps = install_deps(build)
    kept = None if build.aws_services is None else SQSJOBS_SERVICES | build.aws_services
    entries: dict[str, Path | str] = {}
    for path, name in _tree(deps, ""):
        if name.split("/", 1)[0] not in _SKIP_TOP and name != ".complete" and _kept(name, kept):
            entries[name] = path
    for path, name in _tree(Path(sqsjobs.__file__).parent, "sqsjobs"):
        entries[name] = path
    for path, name in _app_sources(build):
        entries[name] = path
    handlers = build.project_dir / "lambda_handlers"
    if handlers.is_dir():  # the project's own entry points, if it keeps any (its handler strings name them)
        for path, name in _tree(handlers, "lambda_handlers"):
            entries[name] = path
    for extra in build.include:
        source = build.project_dir / extra
        if source.is_dir():
            for path, name in _tree(source, extra.as_posix()):
                entries[name] = path
        elif source.is_file():
            entries[extra.as_posix()] = source
        else:
            raise ConfigurationError(f"--include {extra} does not exist in {build.project_dir}")

    warnings = []
    with tempfile.TemporaryDirectory(prefix="sqsjobs-pyc-") as scratch:
        if build.bytecode:
            warnings += _add_bytecode(build, deps, entries, Path(scratch))
        report = _write_zip(build, entries, deps, warnings)
    return report


def _kept(name: str, services: frozenset[str] | None) -> bool:
    """False for a file of a service's botocore data when only ``services``' is kept."""
    if services is None or not name.startswith(_BOTOCORE_DATA):
        return True
    service, separator, _ = name.removeprefix(_BOTOCORE_DATA).partition("/")
    return not separator or service in services  # the files beside the services (endpoints...) stay


def _add_bytecode(build: LambdaBuild, deps: Path, entries: dict[str, Path | str], scratch: Path) -> list[str]:
    """Add each source's ``.pyc`` for the target Python to ``entries``; a warning when none can be made."""
    python = bytecode.interpreter(build.python_version)
    if python is None:
        return [
            f"no python{build.python_version} here to compile bytecode with: the zip carries sources "
            "only, and each cold start compiles what it imports"
        ]
    tag = bytecode.cache_tag(build.python_version)
    files = {n: p for n, p in entries.items() if isinstance(p, Path)}
    from_deps = {n: p for n, p in files.items() if p.is_relative_to(deps)}
    entries.update(bytecode.compiled_deps(deps, from_deps, python, tag))
    own = {n: p for n, p in files.items() if n not in from_deps}
    entries.update(bytecode.compile_sources(own, python, tag, scratch))
    return []


def _write_zip(
    build: LambdaBuild, entries: dict[str, Path | str], deps: Path, warnings: list[str]
) -> BuildReport:
    build.output.parent.mkdir(parents=True, exist_ok=True)
    partial = build.output.with_name(build.output.name + ".partial")
    unzipped = 0
    with zipfile.ZipFile(
        partial, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=build.compress_level
    ) as archive:
        for name in sorted(entries):
            content = entries[name]
            data = content.encode() if isinstance(content, str) else content.read_bytes()
            info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data, compresslevel=build.compress_level)
            unzipped += len(data)
    partial.replace(build.output)
    size = build.output.stat().st_size
    if unzipped > MAX_UNZIPPED_BYTES:
        raise ConfigurationError(
            f"{build.output} unzips to {unzipped} bytes, over Lambda's {MAX_UNZIPPED_BYTES}-byte limit"
        )
    if size > MAX_DIRECT_UPLOAD_BYTES:
        warnings.append(
            f"the zip is {size} bytes, over the {MAX_DIRECT_UPLOAD_BYTES}-byte direct upload limit: "
            "upload it to S3 and point the function at it"
        )
    return BuildReport(
        path=build.output,
        size_bytes=size,
        unzipped_bytes=unzipped,
        files=len(entries),
        handler=HANDLER,
        deps_dir=deps,
        warnings=tuple(warnings),
    )
