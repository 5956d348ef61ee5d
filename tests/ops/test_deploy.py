"""What deploy/ ships: the compose layout's published ports, the Prometheus configuration and
the ports the product's processes serve on."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from core.metrics import WORKER_METRICS_PORT_DEFAULT
from tests.ops.promql_usage import REPOSITORY

DEPLOY = REPOSITORY / "deploy"
PROMETHEUS = DEPLOY / "prometheus" / "prometheus.yml"


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def scrape_ports(job: dict) -> set[int]:
    ports = set()
    for config in job.get("dns_sd_configs", []):
        ports.add(config["port"])
    for config in job.get("static_configs", []):
        ports.update(int(target.rpartition(":")[2]) for target in config["targets"])
    return ports


def test_compose_publishes_no_metrics_port():
    """A worker's metrics (and the web's /metrics, which lists every source) are for the
    Prometheus on the private network, never for the host's clients."""
    for name, service in compose()["services"].items():
        for published in service.get("ports", []):
            target = str(published).rpartition(":")[2]
            assert target != str(WORKER_METRICS_PORT_DEFAULT), name
    worker = compose()["services"]["worker"]
    # Reachable by the Prometheus service on the compose network.
    assert worker["environment"]["CELERY_METRICS_ADDR"] == "0.0.0.0"  # noqa: S104


def test_the_shipped_prometheus_config_scrapes_every_web_and_every_worker():
    config = yaml.safe_load(PROMETHEUS.read_text())
    assert config["rule_files"] == ["alerts.yml"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert scrape_ports(jobs["retrysafe-web"]) == {8000}
    assert scrape_ports(jobs["retrysafe-worker"]) == {WORKER_METRICS_PORT_DEFAULT}
    for job in jobs.values():
        assert job["metrics_path"] == "/metrics"
    # The compose services it names, and the configuration the compose service loads.
    services = compose()["services"]
    names = {
        name
        for job in jobs.values()
        for config in job.get("dns_sd_configs", [])
        for name in config["names"]
    }
    assert names == {"web", "worker"} <= set(services)
    assert "./prometheus:/etc/prometheus:ro" in services["prometheus"]["volumes"]


@pytest.mark.slow
def test_promtool_checks_the_shipped_prometheus_config():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is missing: `make test` installs it")
    check = subprocess.run(
        [promtool, "check", "config", str(PROMETHEUS)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_clients_reach_the_proxy_only():
    """gunicorn never faces clients: compose publishes the nginx service alone (and
    Prometheus's UI on the host's loopback)."""
    services = compose()["services"]
    published = {
        name: service["ports"]
        for name, service in services.items()
        if "ports" in service
    }
    assert published == {"nginx": ["80:80"], "prometheus": ["127.0.0.1:9090:9090"]}
    nginx = services["nginx"]
    assert (
        "./nginx/retrysafe.conf.template:/etc/nginx/templates/default.conf.template:ro"
        in nginx["volumes"]
    )
    assert nginx["environment"]["RETRYSAFE_UPSTREAM"] == "web:8000"
    app_env = compose()["x-app"]["environment"]
    assert (
        nginx["environment"]["WEBHOOK_MAX_BODY_BYTES"]
        == app_env["WEBHOOK_MAX_BODY_BYTES"]
    )
    assert services["web"]["environment"]["TRUSTED_PROXY_COUNT"] == "1"


def test_the_proxy_configuration_reads_requests_whole_and_quickly():
    template = (DEPLOY / "nginx" / "retrysafe.conf.template").read_text()
    webhooks = template[template.index("location /webhooks/") :]
    webhooks = webhooks[: webhooks.index("\n    }")]
    assert "client_max_body_size ${WEBHOOK_MAX_BODY_BYTES};" in webhooks
    assert "client_max_body_size ${DATA_UPLOAD_MAX_MEMORY_SIZE};" in template
    for directive in ("client_header_timeout", "client_body_timeout"):
        seconds = int(re.search(rf"{directive} (\d+)s;", template).group(1))
        assert seconds <= 10, directive
    assert "proxy_request_buffering on;" in template
    assert re.search(r"limit_conn retrysafe_per_address \d+;", template)
    for header in ("For", "Proto", "Host", "Port"):
        assert f"proxy_set_header X-Forwarded-{header} " in template
