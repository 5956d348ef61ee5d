"""Every record a deployment leaves, as the text its readers get: the job's ``detail`` and the
API's answer (its client), its trigger attempts and transitions (operators), the leaves of the
verifiable log and the deployment's evidence bundle (auditors, anyone given one). Tests of
secrets look for a secret in each (docs/security.md, "Secrets")."""

from __future__ import annotations

import io
import json

from django.core.management import call_command

from audit.checkpoints import checkpoint_make
from audit.models import LogLeaf
from deployments.models import Deployment, JobTransition, TriggerAttempt
from tests.audit.ledger_rows import seal_all

# The characters a paste, a CRLF env file or a careless editor leave behind a token.
STRAY = {"space": " ", "cr": "\r", "lf": "\n", "tab": "\t", "nul": "\x00"}


def deployment_records(job: Deployment, *, api) -> dict[str, str]:
    """The deployment's records by reader, each as one text; the log is sealed and signed
    first, so that its leaves and the bundle hold every row (needs a test database with
    committed rows: ``django_db(transaction=True)``)."""
    job.refresh_from_db()
    answer = api.get(f"/api/deployments/{job.public_id}/")
    assert answer.status_code == 200, answer.content
    seal_all()
    checkpoint_make()
    bundle = io.StringIO()
    call_command("audit_bundle", "deployment", job.public_id, stdout=bundle)
    return {
        "detail": job.detail,
        "api": answer.content.decode(),
        "attempts": json.dumps(
            list(TriggerAttempt.objects.filter(job=job).values()), default=str
        ),
        "transitions": json.dumps(
            list(JobTransition.objects.filter(job=job).values()), default=str
        ),
        "log": "\n".join(
            LogLeaf.objects.order_by("index").values_list("leaf", flat=True)
        ),
        "bundle": bundle.getvalue(),
    }


def holding(records: dict[str, str], secret: str) -> list[str]:
    """The records that hold ``secret`` (none, for a test to pass)."""
    return [name for name, text in records.items() if secret in text]
