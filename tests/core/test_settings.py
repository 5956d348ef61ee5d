"""The settings modules as a user runs them: separate processes, real environments."""

import pytest

from tests.processes import manage

pytestmark = pytest.mark.slow

PRODUCTION_ENV = {
    "DJANGO_SETTINGS_MODULE": "config.settings.production",
    "DJANGO_SECRET_KEY": "pr0duct10n-s3cret-7f1e2d3c4b5a69788796a5b4c3d2e1f0-xyzXYZ",
    "DJANGO_ALLOWED_HOSTS": "inbox.example.com",
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/postgres",
    "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
    "AUDIT_SEAL_KEY": "s3al-k3y-of-the-trail-5c4b3a29181706f5e4d3c2b1a0",
    "AUDIT_SIGNING_KEY": "PRIVATE+KEY+inbox.example.com/audit-log+d9b4753b+"
    "AVGtE5mdOff6/e6m6toqm4J0sRAtV+/7yVVtGekCj18p",
    "PATH": "/usr/bin:/bin",
}


def test_check_deploy_is_clean_under_production_settings():
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_production_refuses_to_start_without_a_secret_key():
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "DJANGO_SECRET_KEY"}
    result = manage("check", env=env)
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY" in result.stderr


def test_production_refuses_to_start_without_a_database_url():
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "DATABASE_URL"}
    result = manage("check", env=env)
    assert result.returncode != 0
    assert "DATABASE_URL" in result.stderr


def test_production_refuses_to_start_without_the_audit_seal_key():
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "AUDIT_SEAL_KEY"}
    result = manage("check", env=env)
    assert result.returncode != 0
    assert "AUDIT_SEAL_KEY" in result.stderr


def test_production_refuses_a_short_audit_seal_key():
    result = manage("check", env={**PRODUCTION_ENV, "AUDIT_SEAL_KEY": "short"})
    assert result.returncode != 0
    assert "AUDIT_SEAL_KEY" in result.stderr


def test_local_settings_need_no_environment_at_all(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "APP_VAR_DIR": str(tmp_path)}
    result = manage("check", env=env)
    assert result.returncode == 0, result.stdout + result.stderr


def test_production_refuses_to_start_with_the_bench_endpoints_on():
    result = manage("check", env={**PRODUCTION_ENV, "BENCH_ENDPOINTS": "true"})
    assert result.returncode != 0
    assert "BENCH_ENDPOINTS" in result.stderr
    served = manage(
        "shell",
        "-c",
        "import config.wsgi",
        env=PRODUCTION_ENV | {"BENCH_ENDPOINTS": "true"},
    )
    assert served.returncode != 0
    assert "BENCH_ENDPOINTS" in served.stderr


BENCH_URLS = (
    "from django.conf import settings as s; from django.urls import resolve; "
    "print(s.BENCH_ENDPOINTS, s.SECURE_HSTS_SECONDS, s.SESSION_COOKIE_SECURE, "
    "resolve('/_bench/bare').func.__name__)"
)


def test_the_benchmarks_own_settings_are_production_with_the_floor_endpoints():
    env = {**PRODUCTION_ENV, "DJANGO_SETTINGS_MODULE": "config.settings.bench"}
    result = manage("shell", "-c", BENCH_URLS, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].split() == [
        "True",
        "31536000",
        "True",
        "bare",
    ]
    # The production module without the floors does not mount them.
    result = manage("shell", "-c", BENCH_URLS, env=PRODUCTION_ENV)
    assert result.returncode != 0
    assert "Resolver404" in result.stderr


def test_the_bench_harness_runs_its_stack_on_the_bench_settings():
    from bench.harness import stack_env

    env = stack_env()
    assert env["DJANGO_SETTINGS_MODULE"] == "config.settings.bench"
    assert "BENCH_ENDPOINTS" not in env


def test_a_renamed_variable_is_still_read_under_its_former_name(monkeypatch):
    from config.settings.base import env_renamed

    read = {"cast": "int", "name": "BULK_REPLAY_CHUNK_SIZE"}
    monkeypatch.delenv("BULK_REPLAY_CHUNK_SIZE", raising=False)
    monkeypatch.delenv("AUDIT_BULK_REPLAY_CHUNK_SIZE", raising=False)
    assert (
        env_renamed(**read, former="AUDIT_BULK_REPLAY_CHUNK_SIZE", default=200) == 200
    )
    monkeypatch.setenv("AUDIT_BULK_REPLAY_CHUNK_SIZE", "7")
    assert env_renamed(**read, former="AUDIT_BULK_REPLAY_CHUNK_SIZE", default=200) == 7
    monkeypatch.setenv("BULK_REPLAY_CHUNK_SIZE", "9")  # the new name wins
    assert env_renamed(**read, former="AUDIT_BULK_REPLAY_CHUNK_SIZE", default=200) == 9
