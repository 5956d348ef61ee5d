"""The checkpoints in the audit console: read-only, visible to auditors."""

import pytest
from django.urls import reverse

from audit.checkpoints import checkpoint_make
from audit.leaves import LeafInput
from audit.log import log_append

pytestmark = pytest.mark.django_db


def test_auditors_see_the_checkpoints_and_can_change_none(auditor_client):
    made = log_append(leaves=[LeafInput(kind="sample_record", record_id=1)])
    checkpoint = checkpoint_make()
    changelist = auditor_client.get(reverse("admin:audit_logcheckpoint_changelist"))
    assert changelist.status_code == 200
    assert made.root.hex()[:16].encode() in changelist.content
    assert b"addlink" not in changelist.content
    detail = auditor_client.get(
        reverse("admin:audit_logcheckpoint_change", args=[checkpoint.pk])
    )
    assert detail.status_code == 200
    assert checkpoint.note.splitlines()[-1].encode() in detail.content
    delete = reverse("admin:audit_logcheckpoint_delete", args=[checkpoint.pk])
    assert auditor_client.post(delete, {"post": "yes"}).status_code == 403
