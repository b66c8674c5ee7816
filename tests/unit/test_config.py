"""Settings: explicit > environment > default, checked for values that cannot work."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sqsjobs import App, ConfigurationError, Settings


def test_explicit_beats_environment_beats_default():
    env = {"SQSJOBS_CONCURRENCY": "7", "SQSJOBS_LEASE_S": "12.5", "AWS_REGION": "eu-west-1"}
    settings = Settings.from_env("shop", env=env, lease_s=30.0)
    assert (settings.concurrency, settings.lease_s, settings.region) == (7, 30.0, "eu-west-1")
    assert Settings.from_env("shop", env={}).concurrency == 10


def test_queues_keep_messages_14_days_unless_told_otherwise():
    assert Settings.from_env("shop", env={}).message_retention_s == 1_209_600
    assert Settings.from_env("shop", env={"SQSJOBS_MESSAGE_RETENTION_S": "3600"}).message_retention_s == 3600


def test_names_derive_from_the_app():
    settings = Settings.from_env("shop", env={})
    assert settings.table_name == "shop-jobs"
    assert (settings.queue_name("default"), settings.dlq_name("default")) == (
        "shop-default",
        "shop-default-dlq",
    )


def test_endpoint_and_queue_caps_come_from_the_environment():
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:4566", "SQSJOBS_QUEUE_CONCURRENCY": "default=4,reports=1"}
    settings = Settings.from_env("shop", env=env)
    assert settings.endpoint_url == "http://127.0.0.1:4566"
    assert dict(settings.queue_concurrency) == {"default": 4, "reports": 1}


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"SQSJOBS_CONCURRENCY": "many"}, "not a number"),
        ({"SQSJOBS_RECEIVE_WAIT_S": "30"}, "receive_wait_s must be 0..20"),
        ({"SQSJOBS_VISIBILITY_TIMEOUT_S": "50000"}, "visibility_timeout_s must be 1..43200"),
        ({"SQSJOBS_QUEUE_CONCURRENCY": "default"}, "expected queue=N"),
        ({"SQSJOBS_MESSAGE_RETENTION_S": "1209601"}, "message_retention_s must be 60..1209600"),
        ({"SQSJOBS_MESSAGE_RETENTION_S": "59"}, "message_retention_s must be 60..1209600"),
        ({"SQSJOBS_DEFER_RECHECK_MAX_S": "0.5"}, "defer_recheck_max_s must be at least 1 s"),
    ],
)
def test_impossible_settings_are_refused_with_the_reason(env, match):
    with pytest.raises(ConfigurationError, match=match):
        Settings.from_env("shop", env=env)


def test_creating_an_app_reads_nothing_until_first_use(monkeypatch):
    app = App("shop")
    monkeypatch.setenv("SQSJOBS_CONCURRENCY", "3")
    assert app.settings.concurrency == 3


def test_apps_load_from_a_dotted_path():
    with pytest.raises(ConfigurationError, match="expected an app path"):
        App.from_path("nocolon")
    with pytest.raises(ConfigurationError, match="cannot import"):
        App.from_path("no_such_module_xyz:app")
    assert App.from_path("tests.apps.sleepy:app").registry.queues() == ["default"]


def test_a_misspelt_setting_is_refused_at_construction_with_the_closest_name(monkeypatch):
    # GIVEN an environment that would make any settings read fail
    monkeypatch.setenv("SQSJOBS_CONCURRENCY", "many")
    # WHEN an App is created with a typo, THEN it fails at once (before any read), naming both keys
    with pytest.raises(
        ConfigurationError, match=r"'visiblity_timeout_s' \(did you mean 'visibility_timeout_s'\?\)"
    ):
        App("shop", visiblity_timeout_s=30)
    # ... while correct names still defer the environment to first use
    app = App("shop", visibility_timeout_s=30)
    with pytest.raises(ConfigurationError, match="not a number"):
        _ = app.settings


def test_configure_checks_names_too_and_keeps_the_settings_it_had():
    # GIVEN an App with a valid explicit setting
    app = App("shop", lease_s=20.0)
    # WHEN configure is called with a typo, THEN it is refused and nothing changes
    with pytest.raises(ConfigurationError, match=r"'endpoint' \(did you mean 'endpoint_url'\?\)"):
        app.configure(endpoint="http://127.0.0.1:4566")
    assert app.settings.lease_s == 20.0
    assert app.settings.endpoint_url is None


def test_every_unknown_name_is_reported_at_once():
    with pytest.raises(ConfigurationError) as info:
        Settings.check_names(["colour", "concurrency", "app_name"])
    assert str(info.value) == (
        "unknown settings 'app_name' (it is the App's name, its first argument), 'colour'; "
        "settings are the fields of sqsjobs.Settings"
    )


# ── retention by end state and type ─────────────────────────────────────────────────────────────
def test_the_most_specific_retention_rule_wins_and_the_rest_keep_retention_s():
    settings = Settings(
        app_name="r",
        retention_s=14 * 86_400,
        payload_object_days=91,  # S3 objects outlive the longest-kept record
        retention={
            "succeeded": timedelta(days=1),
            "dead": 30 * 86_400,
            "reports.build": 7 * 86_400,
            "reports.build:dead": 90 * 86_400,
        },
    )
    assert settings.retention_for("mail.send", "succeeded") == 86_400
    assert settings.retention_for("mail.send", "dead") == 30 * 86_400
    assert settings.retention_for("mail.send", "cancelled") == 14 * 86_400
    assert settings.retention_for("reports.build", "succeeded") == 7 * 86_400  # the type's, over the state's
    assert settings.retention_for("reports.build", "dead") == 90 * 86_400
    # what must outlive every record (tag items, S3 objects) takes the longest
    assert settings.longest_retention_s == 90 * 86_400 and settings.retention_days == 90


def test_retention_rules_come_from_the_environment_and_bad_ones_are_refused():
    settings = Settings.from_env("r", {"SQSJOBS_RETENTION": "succeeded=86400, reports.build:dead=1728000"})
    assert settings.retention == {"succeeded": 86_400.0, "reports.build:dead": 1_728_000.0}
    with pytest.raises(ConfigurationError, match="after ':' comes an end state"):
        Settings(app_name="r", retention={"reports.build:running": 60})
    with pytest.raises(ConfigurationError, match="must be a positive duration"):
        Settings(app_name="r", retention={"dead": 0})
    with pytest.raises(ConfigurationError, match="expected key=seconds"):
        Settings.from_env("r", {"SQSJOBS_RETENTION": "dead=a month"})
