"""The settings modules as a user runs them: separate processes, real environments."""

import json
import subprocess
import sys

import pytest

from tests import processes
from tests.processes import ROOT, manage

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


@pytest.mark.parametrize(
    "key",
    [
        "short-key",
        "a" * 64,  # long, but fewer than five different characters
        "django-insecure-" + "7f1e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7d6e5f4",
    ],
    ids=["short", "repetitive", "django-insecure"],
)
def test_production_refuses_a_weak_secret_key(key):
    """What ``check --deploy`` only warns about (security.W009) stops the start."""
    result = manage("check", env={**PRODUCTION_ENV, "DJANGO_SECRET_KEY": key})
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY" in result.stderr
    assert key not in result.stderr


@pytest.mark.parametrize("hosts", ["*", "inbox.example.com,*"])
def test_production_refuses_any_host(hosts):
    result = manage("check", env={**PRODUCTION_ENV, "DJANGO_ALLOWED_HOSTS": hosts})
    assert result.returncode != 0
    assert "DJANGO_ALLOWED_HOSTS" in result.stderr


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
    from config.settings._helpers import env_renamed

    read = {"cast": "float", "name": "RELAY_SWEEP_INTERVAL_SECONDS"}
    former = "INBOX_SWEEP_INTERVAL_SECONDS"  # the contract's name: read for good
    monkeypatch.delenv("RELAY_SWEEP_INTERVAL_SECONDS", raising=False)
    monkeypatch.delenv(former, raising=False)
    assert env_renamed(**read, former=former, default=30) == 30
    monkeypatch.setenv(former, "7")
    assert env_renamed(**read, former=former, default=30) == 7
    monkeypatch.setenv("RELAY_SWEEP_INTERVAL_SECONDS", "9")  # the new name wins
    assert env_renamed(**read, former=former, default=30) == 9


SETTINGS_IN_USE = (
    "from django.conf import settings; print(settings.SETTINGS_MODULE, settings.DEBUG)"
)


def python(program: str, *, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", program],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("entry_point", ["config.wsgi", "config.celery_app"])
def test_the_web_and_celery_entry_points_default_to_production_settings(entry_point):
    """``gunicorn config.wsgi`` and ``celery -A config`` with DJANGO_SETTINGS_MODULE
    forgotten: production settings (DEBUG off), never the local ones."""
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "DJANGO_SETTINGS_MODULE"}
    result = python(f"import {entry_point}; {SETTINGS_IN_USE}", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["config.settings.production", "False"]
    # With none of production's variables either, they refuse to start.
    result = python(
        f"import {entry_point}; {SETTINGS_IN_USE}", env={"PATH": "/usr/bin"}
    )
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY" in result.stderr


def test_manage_py_defaults_to_the_local_settings(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "APP_VAR_DIR": str(tmp_path)}
    result = manage("shell", "-c", SETTINGS_IN_USE, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-2:] == ["config.settings.local", "True"]


@pytest.mark.parametrize(
    "variable",
    [
        {"DATABASE_URL": "postgres://postgres@127.0.0.1:5432/postgres"},
        {"DJANGO_ALLOWED_HOSTS": "inbox.example.com"},
        {"DJANGO_ALLOWED_HOSTS": "localhost,*"},
    ],
    ids=["server-database", "public-host", "any-host"],
)
def test_local_settings_refuse_a_production_like_environment_unless_debug_is_chosen(
    tmp_path, variable
):
    """The local settings turn DEBUG on by default: with a database server or a host other
    than loopback they refuse to start, unless DJANGO_DEBUG says what is wanted."""
    env = {"PATH": "/usr/bin:/bin", "APP_VAR_DIR": str(tmp_path), **variable}
    refused = manage("check", env=env)
    assert refused.returncode != 0
    assert "DJANGO_DEBUG" in refused.stderr
    assert "config.settings.production" in refused.stderr
    for chosen in ("true", "false"):
        result = manage(
            "shell", "-c", SETTINGS_IN_USE, env={**env, "DJANGO_DEBUG": chosen}
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.split()[-1] == str(chosen == "true")


def test_local_settings_accept_the_loopback_hosts(tmp_path):
    env = {
        "PATH": "/usr/bin:/bin",
        "APP_VAR_DIR": str(tmp_path),
        "DJANGO_ALLOWED_HOSTS": "localhost,127.0.0.1,[::1]",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'other.sqlite3'}",
    }
    result = manage("check", env=env)
    assert result.returncode == 0, result.stderr


DATABASE_IN_USE = (
    "import json; from django.conf import settings; d = settings.DATABASES['default']; "
    "print(json.dumps([d['ENGINE'], d['OPTIONS']]))"
)


def database_settings(prelude: str, **env: str) -> tuple[str, dict]:
    environment = {**PRODUCTION_ENV, **env}
    result = python(f"{prelude}; {DATABASE_IN_USE}", env=environment)
    assert result.returncode == 0, result.stderr
    engine, options = json.loads(result.stdout.strip().splitlines()[-1])
    return engine, options


# What every connection asks of the server's side (DATABASE_SERVER_KEEPALIVES, then
# DATABASE_JIT_OFF and DATABASE_PARALLEL_QUERY_OFF).
SERVER_KEEPALIVES = (
    "-c tcp_keepalives_idle=10 -c tcp_keepalives_interval=3 "
    "-c tcp_keepalives_count=3 -c tcp_user_timeout=19000"
)
SERVER_OPTIONS = f"{SERVER_KEEPALIVES} -c jit=off -c max_parallel_workers_per_gather=0"


def test_every_process_bounds_its_connect_and_finds_a_dead_link():
    for prelude in ("import config.wsgi", "import config.celery_app"):
        _, options = database_settings(prelude)
        assert options["connect_timeout"] == 3
        assert options["keepalives"] == 1
        assert options["keepalives_idle"] == 10
        assert options["tcp_user_timeout"] == 19000
        # and so does the server on its side (tests/core/test_database_partition_sessions.py).
        assert options["options"].startswith(SERVER_OPTIONS)


def test_behind_a_pooler_no_process_sends_startup_options():
    for prelude in ("import config.wsgi", "import config.celery_app"):
        _, options = database_settings(
            prelude,
            DATABASE_SERVER_KEEPALIVES="false",
            WEB_STATEMENT_TIMEOUT_ON_SERVER="false",
            DATABASE_JIT_OFF="false",
            DATABASE_PARALLEL_QUERY_OFF="false",
        )
        assert "options" not in options
        assert options["tcp_user_timeout"] == 19000


def test_only_web_processes_get_the_statement_timeout_and_bounded_waits():
    """The WSGI application's processes, not the workers (nor beat, the relay, migrations
    or manage.py, which load the Celery app or the settings alone)."""
    engine, options = database_settings("import config.wsgi")
    assert engine == "core.pgbackend"
    assert options["options"] == f"{SERVER_OPTIONS} -c statement_timeout=5000"
    assert options["answer_timeout"] == 6
    for prelude in ("import config.celery_app", "import django; django.setup()"):
        engine, options = database_settings(prelude)
        assert engine == "django.db.backends.postgresql"
        assert options["options"] == SERVER_OPTIONS
        assert "answer_timeout" not in options
    # Tunable, and off with 0; behind PgBouncer the server's part is the pooler's.
    _, options = database_settings(
        "import config.wsgi", WEB_STATEMENT_TIMEOUT_SECONDS="2.5"
    )
    assert (options["options"], options["answer_timeout"]) == (
        f"{SERVER_OPTIONS} -c statement_timeout=2500",
        3.5,
    )
    engine, options = database_settings(
        "import config.wsgi", WEB_STATEMENT_TIMEOUT_ON_SERVER="false"
    )
    assert engine == "core.pgbackend"
    assert options["options"] == SERVER_OPTIONS
    engine, options = database_settings(
        "import config.wsgi", WEB_STATEMENT_TIMEOUT_SECONDS="0"
    )
    assert engine == "django.db.backends.postgresql"
    assert options["options"] == SERVER_OPTIONS


BARE_FLOOR = (
    "import bench.bare_wsgi as b; from django.urls import resolve; "
    "h = b.application; "
    "print(h._middleware_chain.__wrapped__ == h._get_response, "
    "resolve('/_bench/bare-insert', urlconf=b.URLCONF).func.__name__)"
)


def test_the_bare_floor_has_no_middleware_and_only_the_benchmarks_settings_serve_it():
    env = {**PRODUCTION_ENV, "DJANGO_SETTINGS_MODULE": "config.settings.bench"}
    result = subprocess.run(
        [sys.executable, "-c", BARE_FLOOR],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "bare_insert"]
    refused = subprocess.run(
        [sys.executable, "-c", "import bench.bare_wsgi"],
        cwd=ROOT,
        env=PRODUCTION_ENV,
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode != 0
    assert "BENCH_ENDPOINTS" in refused.stderr


# A secret or token with a stray character is refused at start, by every process, with a
# message that names the variable and the problem and never quotes the value
# (tests/core/test_secret_values.py has the rule itself; an environment cannot carry a NUL).
GITHUB_TOKEN = "ghp_startcheck_0123456789abcdefABCDEF"
HTTP_SECRET = "whsec_0snSPuSyuVpC58vLvZHhJ9zhTQStWIA3kuIC6sLEFjk="
STRAY = {"space": " ", "cr": "\r", "lf": "\n", "tab": "\t"}
PROBLEMS = {
    "space": "has a trailing space",
    "cr": "contains a control character",
    "lf": "contains a control character",
    "tab": "contains a control character",
}


def refused_start(output: str, *, variable: str, value: str, name: str) -> None:
    assert variable in output, output[-3000:]
    assert PROBLEMS[name] in output, output[-3000:]
    assert value not in output


@pytest.mark.parametrize("name", STRAY)
@pytest.mark.parametrize(
    ("variable", "value", "executor"),
    [
        ("GITHUB_TOKEN", GITHUB_TOKEN, {"DEPLOY_EXECUTOR": "github"}),
        (
            "DEPLOY_HTTP_SECRET",
            HTTP_SECRET,
            {"DEPLOY_EXECUTOR": "http", "DEPLOY_HTTP_URL": "https://ci.example/hook"},
        ),
    ],
    ids=["GITHUB_TOKEN", "DEPLOY_HTTP_SECRET"],
)
def test_a_process_refuses_to_start_with_a_stray_character_in_a_secret(
    variable, value, executor, name
):
    env = {**PRODUCTION_ENV, **executor, variable: value + STRAY[name]}
    result = manage("check", env=env)
    assert result.returncode != 0
    refused_start(
        result.stdout + result.stderr, variable=variable, value=value, name=name
    )


@pytest.mark.parametrize(
    "variable", ["DJANGO_SECRET_KEY", "AUDIT_SEAL_KEY", "AUDIT_SIGNING_KEY"]
)
def test_the_product_s_own_keys_are_refused_from_a_crlf_env_file(variable):
    """A CRLF env file leaves a CR at the end of every value."""
    value = PRODUCTION_ENV[variable]
    result = manage("check", env={**PRODUCTION_ENV, variable: value + "\r"})
    assert result.returncode != 0
    refused_start(
        result.stdout + result.stderr, variable=variable, value=value, name="cr"
    )


def test_a_celery_worker_refuses_to_start_with_a_token_from_a_crlf_env_file(tmp_path):
    worker = processes.celery_worker(
        tmp_path, env={"DEPLOY_EXECUTOR": "github", "GITHUB_TOKEN": GITHUB_TOKEN + "\r"}
    ).start()
    try:
        processes.wait_until(lambda: not worker.alive(), timeout=90)
    finally:
        worker.stop()
    assert worker.popen.returncode != 0
    refused_start(worker.log(), variable="GITHUB_TOKEN", value=GITHUB_TOKEN, name="cr")


def test_gunicorn_refuses_to_serve_with_a_secret_that_ends_in_a_space(tmp_path):
    port = processes.free_port()
    server = processes.gunicorn(
        tmp_path, port=port, workers=1, env={"DEPLOY_HTTP_SECRET": HTTP_SECRET + " "}
    ).start()
    try:
        processes.wait_until(lambda: not server.alive(), timeout=90)
    finally:
        server.stop()
    assert server.popen.returncode != 0
    refused_start(
        server.log(), variable="DEPLOY_HTTP_SECRET", value=HTTP_SECRET, name="space"
    )


# A statement PostgreSQL estimates far above jit_above_cost (100,000), run nowhere.
EXPENSIVE_ESTIMATE = "EXPLAIN SELECT count(*) FROM generate_series(1, 100000000) a"


@pytest.mark.django_db
def test_the_product_s_sessions_never_compile_a_statement_nor_start_workers():
    """DATABASE_JIT_OFF: a connection of the product's plans even a statement estimated as
    expensive as this one without JIT compilation (the server compiles it for a session of
    its own: checked), which cost an admin search of the partitioned inbox 4.4 s before
    19 ms of work; DATABASE_PARALLEL_QUERY_OFF: nor does it start parallel workers, which
    the same search's estimate asked for (docs/scaling.md, "Database timeouts")."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(EXPENSIVE_ESTIMATE)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("SHOW max_parallel_workers_per_gather")
        assert cursor.fetchone() == ("0",)
    assert "JIT" not in plan
    params = connection.get_connection_params()
    params.pop("options")
    params.pop("server_side_binding", None)
    params.pop("prepare_threshold", None)
    params.pop("answer_timeout", None)
    with connection.Database.connect(**params) as plain:
        plan = "\n".join(row[0] for row in plain.execute(EXPENSIVE_ESTIMATE))
        workers = plain.execute("SHOW max_parallel_workers_per_gather").fetchone()
    assert "JIT:" in plan
    assert workers != ("0",)
