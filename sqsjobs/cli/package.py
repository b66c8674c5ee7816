"""``sqsjobs package``: build deployment artifacts (today: the Lambda zip)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sqsjobs.cli.common import EXIT_USAGE, JsonOpt, abort, console, guarded
from sqsjobs.cli.render import print_json
from sqsjobs.deploy.packaging import DEFAULT_PYTHON, PLATFORMS, LambdaBuild, build_lambda_zip, install_deps

package_cli = typer.Typer(no_args_is_help=True, help="Build deployment artifacts.")


@package_cli.command("lambda")
def lambda_zip(
    app: Annotated[
        str | None,
        typer.Option(
            "--app", envvar="SQSJOBS_APP", help="App to package, e.g. shop.jobs:app [env: SQSJOBS_APP]"
        ),
    ] = None,
    output: Annotated[Path, typer.Option(help="Where to write the zip")] = Path("dist/lambda.zip"),
    python_version: Annotated[
        str, typer.Option(help="The function's Python (its runtime, e.g. python3.12 → 3.12)")
    ] = DEFAULT_PYTHON,
    arch: Annotated[
        str, typer.Option(help=f"The function's architecture: {' or '.join(PLATFORMS)}")
    ] = "x86_64",
    requirement: Annotated[
        list[str] | None,
        typer.Option(
            "--requirement", "-r", help="A requirements file of the app's own dependencies (repeatable)"
        ),
    ] = None,
    lock: Annotated[
        Path | None,
        typer.Option(
            help="A hashed lock of every package the zip installs (make lock's locks/lambda.txt): "
            "installed exactly, each file checked against its hashes"
        ),
    ] = None,
    include: Annotated[
        list[Path] | None, typer.Option(help="Extra file or directory to put in the zip (repeatable)")
    ] = None,
    cache_dir: Annotated[Path | None, typer.Option(help="Dependency cache [default: build/lambda]")] = None,
    offline: Annotated[
        bool, typer.Option(help="Fail rather than run pip when dependencies are not cached")
    ] = False,
    deps_only: Annotated[bool, typer.Option(help="Only install the dependencies into the cache")] = False,
    compress_level: Annotated[int, typer.Option(min=0, max=9, help="zlib level (1 fast, 9 small)")] = 6,
    bytecode: Annotated[
        bool,
        typer.Option(
            "--bytecode/--no-bytecode",
            help="Bytecode compiled by python<version> beside the sources (faster cold starts)",
        ),
    ] = True,
    slim: Annotated[
        bool,
        typer.Option(
            help="Keep botocore's data only for the AWS services sqsjobs calls and the --aws-service ones"
        ),
    ] = False,
    aws_service: Annotated[
        list[str] | None,
        typer.Option(help="With --slim: an AWS service the app's own code calls, e.g. ses (repeatable)"),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Build the deployment zip of a Lambda SQS worker (handler sqsjobs.runtime.lambda_handlers.sqs_worker)."""
    if app is None and not deps_only:
        raise abort("--app (or SQSJOBS_APP) is required", EXIT_USAGE)
    if aws_service and not slim:
        raise abort(
            "--aws-service names what --slim keeps; without --slim every service's data is kept", EXIT_USAGE
        )
    with guarded():
        build = LambdaBuild(
            app=app or "",
            output=output,
            python_version=python_version,
            arch=arch,
            requirements=tuple(f"-r{r}" for r in requirement or ()),
            lock=lock,
            include=tuple(include or ()),
            project_dir=Path.cwd(),
            cache_dir=cache_dir,
            offline=offline,
            compress_level=compress_level,
            bytecode=bytecode,
            aws_services=frozenset(aws_service or ()) if slim else None,
        )
        if deps_only:
            deps = install_deps(build)
            if json_out:
                print_json({"deps_dir": str(deps)})
            else:
                console.print(f"dependencies in {deps}")
            return
        report = build_lambda_zip(build)
    if json_out:
        print_json(
            {
                "path": str(report.path),
                "size_bytes": report.size_bytes,
                "unzipped_bytes": report.unzipped_bytes,
                "files": report.files,
                "handler": report.handler,
                "python_version": python_version,
                "arch": arch,
                "warnings": list(report.warnings),
            }
        )
        return
    for warning in report.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    console.print(
        f"{report.path}: {report.size_bytes / 1e6:.1f} MB ({report.unzipped_bytes / 1e6:.1f} MB unzipped, "
        f"{report.files} files) for Python {python_version} on {arch}; handler [bold]{report.handler}[/bold], "
        "set SQSJOBS_APP on the function"
    )
    typer.echo(str(report.path))
