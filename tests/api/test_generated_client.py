"""A client generated from the OpenAPI document sends only what the server accepts, checked by a type checker.

openapi-python-client (a generator users run) builds a client from the shop example's document;
mypy --strict then checks calls of it kept in ``tests/api/client_calls``: one that enqueues each of
the shop's job types type-checks, and the mismatches the server would refuse (a payload of another
type, a request naming another type, a field of the wrong type, an unregistered type) are refused
by the checker where they are written. The document is what makes that possible: one request class
per job type (a ``oneOf`` told apart by ``type``), each payload's model, one ``Problem`` class; and
on the way back, a class for every record an answer holds (a page's rows, a job's history), not a dict.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from examples.shop import app as shop
from sqsjobs.api.http_app import create_app

CALLS = Path(__file__).with_name("client_calls")
TOOLS = Path(sys.executable).parent


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding ``shop_client``, generated from the shop App's document as a user would."""
    root = tmp_path_factory.mktemp("generated")
    (root / "openapi.json").write_text(json.dumps(create_app(shop).openapi()))
    (root / "config.json").write_text(json.dumps({"package_name_override": "shop_client", "post_hooks": []}))
    run = subprocess.run(
        [
            str(TOOLS / "openapi-python-client"),
            "generate",
            "--path",
            "openapi.json",
            "--config",
            "config.json",
            "--meta",
            "none",
            "--output-path",
            "shop_client",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    # Anything it could not turn into code is a warning, and a missing piece of the client.
    assert "Warning" not in output and "Unable" not in output, output
    return root


def mypy(root: Path, *files: str) -> subprocess.CompletedProcess[str]:
    for name in files:
        (root / name).write_text((CALLS / name).read_text())
    return subprocess.run(
        [str(TOOLS / "mypy"), "--strict", "--no-incremental", "--python-version", "3.11", *files],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def checked(generated: Path) -> subprocess.CompletedProcess[str]:
    """One ``mypy --strict`` run over both files of calls (a run over the generated client costs ~20 s)."""
    run = mypy(generated, "enqueue_each_type.py", "mismatched_pairings.py")
    assert run.returncode in (0, 1), run.stdout + run.stderr  # 2: mypy itself failed
    return run


def errors_in(run: subprocess.CompletedProcess[str], name: str) -> list[str]:
    return [line for line in run.stdout.splitlines() if line.startswith(f"{name}:")]


def test_a_call_enqueueing_each_example_type_type_checks(checked):
    calls = (CALLS / "enqueue_each_type.py").read_text()
    assert set(re.findall(r'type_="([^"]+)"', calls)) == {spec.name for spec in shop.registry}
    assert errors_in(checked, "enqueue_each_type.py") == []


def test_what_the_server_would_refuse_the_type_checker_refuses_where_it_is_written(checked):
    calls = (CALLS / "mismatched_pairings.py").read_text()
    assert calls.count("# type: ignore[arg-type]") == 4
    # --strict warns of an ignore no error used: each line is refused, for the reason it names.
    assert errors_in(checked, "mismatched_pairings.py") == []


def test_every_operation_is_generated_and_problems_share_one_class(generated):
    document = create_app(shop).openapi()
    operations = {op["operationId"] for ops in document["paths"].values() for op in ops.values()}
    modules = {p.stem for p in (generated / "shop_client" / "api").rglob("*.py") if p.stem != "__init__"}
    assert operations - {"docs", "openapi", "redoc", "swagger_ui"} <= modules
    models = {p.stem for p in (generated / "shop_client" / "models").glob("*.py")}
    assert "problem" in models
    assert not [m for m in models if re.search(r"_response_\d{3}", m)]


def attributes(root: Path, module: str) -> dict[str, str]:
    """The members a generated model class declares, each with its type as written."""
    tree = ast.parse((root / "shop_client" / "models" / f"{module}.py").read_text())
    [model] = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    return {
        node.target.id: ast.unparse(node.annotation)
        for node in model.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }


def test_a_page_of_jobs_and_a_jobs_history_come_back_as_typed_records_not_dicts(generated):
    # GET /jobs: each row of the page is a class of its own, its members typed
    assert attributes(generated, "job_page")["jobs"] == "list[JobRow]"
    row = attributes(generated, "job_row")
    assert {"id": "str", "status": "str", "type_": "str", "queue": "str"}.items() <= row.items()
    assert row["attempt"] == "int | None"
    # GET /jobs/{job_id}: each attempt of the history likewise, and the last error
    record = attributes(generated, "job_record")
    assert record["history"] == "list[JobAttempt] | Unset"
    assert record["last_error"] == "JobError | None | Unset"
    attempt = attributes(generated, "job_attempt")
    assert {"attempt": "int", "outcome": "str", "worker": "str"}.items() <= attempt.items()
    assert attempt["started_at"] == "None | str" and attempt["error"] == "None | str"
