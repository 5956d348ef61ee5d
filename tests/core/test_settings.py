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


def test_local_settings_need_no_environment_at_all(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "APP_VAR_DIR": str(tmp_path)}
    result = manage("check", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
