"""Region and retries are resolved the botocore way unless the App sets them.

Each case runs in a fresh interpreter with its own AWS environment (a profile in a config file of
its own, no AWS_REGION): the clients the App makes say which region and retry policy they use.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow  # each test starts a process

PROBE = textwrap.dedent(
    """
    import json, sys
    from sqsjobs import App
    app = App("t", **json.loads(sys.argv[1]))
    client = app.clients.boto3.get("sqs")
    print(json.dumps({"region": client.meta.region_name, "retries": client.meta.config.retries}))
    """
)

PROFILE = "[profile ops]\nregion = eu-west-3\nretry_mode = adaptive\nmax_attempts = 2\n"


def clients(tmp_path, settings: dict, **env: str) -> dict:
    config = tmp_path / "config"
    config.write_text(PROFILE)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SQSJOBS_"))}
    base |= {"AWS_CONFIG_FILE": str(config), "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(settings)],
        env=base | env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_the_profiles_region_and_retries_apply_when_the_app_sets_none(tmp_path):
    found = clients(tmp_path, {}, AWS_PROFILE="ops")
    assert found == {"region": "eu-west-3", "retries": {"mode": "adaptive", "total_max_attempts": 2}}


def test_environment_retries_apply_and_the_apps_region_wins(tmp_path):
    found = clients(tmp_path, {"region": "ap-south-1"}, AWS_PROFILE="ops", AWS_MAX_ATTEMPTS="7")
    assert found["region"] == "ap-south-1"
    assert found["retries"]["total_max_attempts"] == 7


@pytest.mark.parametrize("endpoint", [None, "http://127.0.0.1:9"])
def test_nothing_configured_keeps_the_standard_retries_and_an_emulator_gets_a_region(tmp_path, endpoint):
    settings = {"endpoint_url": endpoint} if endpoint else {"region": "eu-central-1"}
    found = clients(tmp_path, settings)  # no profile: nothing configured
    assert found["retries"] == {"mode": "standard", "total_max_attempts": 6}  # 5 retries
    assert found["region"] == ("us-east-1" if endpoint else "eu-central-1")
