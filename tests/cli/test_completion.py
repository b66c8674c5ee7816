"""Shell completion through click's protocol: the shell runs ``sqsjobs`` with ``_SQSJOBS_COMPLETE`` set.

Each case runs the CLI as the shell would, in a fresh process with the variables bash (``COMP_WORDS``,
``COMP_CWORD``) or zsh/fish (``_TYPER_COMPLETE_ARGS``) set, and reads the candidates it prints. A TAB
press must stay cheap: the process that answers it loads no AWS SDK.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sqsjobs.job import JobStatus

pytestmark = pytest.mark.slow  # each test starts a process

#: Runs ``python -m sqsjobs`` and, as it exits, writes to stderr which AWS SDK modules it loaded.
WRAPPER = """
import atexit, json, runpy, sys
sdk = {"boto3", "botocore", "aiobotocore", "aws_lambda_powertools"}
atexit.register(lambda: print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in sdk)), file=sys.stderr))
sys.argv = ["sqsjobs", *sys.argv[1:]]
runpy.run_module("sqsjobs", run_name="__main__")
"""


def complete(env: dict[str, str], *args: str, shell: str | None = None) -> tuple[str, list[str]]:
    """Run the CLI as ``shell`` would (its child: ``--show-completion`` detects the parent's shell)."""
    command = [sys.executable, "-c", WRAPPER, *args]
    if shell is not None:  # the shell stays the parent: a command after the CLI keeps it from exec'ing
        command = [shell, "-c", '"$0" "$@"; exit $?', *command]
    done = subprocess.run(
        command,
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout, json.loads(done.stderr.strip().splitlines()[-1])


def bash(line: str) -> list[str]:
    words = line.split(" ")
    out, sdk = complete(
        {"_SQSJOBS_COMPLETE": "complete_bash", "COMP_WORDS": line, "COMP_CWORD": str(len(words) - 1)}
    )
    assert sdk == [], f"a TAB press loaded {sdk}"
    return out.split()


def test_bash_completes_commands_groups_and_options():
    assert bash("sqsjobs jo") == ["jobs"]
    assert {"provision", "worker", "dlq", "jobs", "schedules", "package"} <= set(bash("sqsjobs "))
    assert set(bash("sqsjobs dlq ")) >= {"list", "show", "replay"}
    assert bash("sqsjobs jobs cancel --ye") == ["--yes"]
    assert "--json" in bash("sqsjobs provision --")


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_complete_an_options_choices(shell):
    env = {"_SQSJOBS_COMPLETE": f"complete_{shell}", "_TYPER_COMPLETE_ARGS": "sqsjobs jobs cancel --status "}
    if shell == "fish":  # fish's script asks for the candidates themselves (its other action: is there any)
        env["_TYPER_COMPLETE_FISH_ACTION"] = "get-args"
    out, sdk = complete(env)
    assert sdk == []
    for status in JobStatus:
        assert status.value in out, out


def test_show_completion_prints_a_script_that_calls_back_with_the_protocols_variable():
    out, _ = complete({}, "--show-completion", shell="bash")
    assert "_SQSJOBS_COMPLETE=complete_bash" in out
    assert "complete " in out and "sqsjobs" in out
