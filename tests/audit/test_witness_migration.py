"""Deliveries to the witness recorded with its whole URL (before audit 0006) lose its user
info and query on migration: the database is taken back to audit 0005, filled as it was then,
and migrated forward again, as an existing deployment would be."""

from __future__ import annotations

import pytest

from audit.checkpoints import witness_target
from tests.core.test_migrations import latest, migrate

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.migrations]

WITH_TOKEN = "https://ops:pw@witness.example/add-checkpoint?token=witness-s3cret"
PLAIN = "https://witness.example/add-checkpoint"


@pytest.fixture
def before_witness_targets():
    yield migrate([("audit", "0005_log_cursors")])
    migrate(latest())


def test_a_delivery_recorded_with_a_token_keeps_only_its_fingerprint(
    before_witness_targets,
):
    old = before_witness_targets
    checkpoint = old.get_model("audit", "LogCheckpoint")
    delivery = old.get_model("audit", "LogCheckpointDelivery")
    first, second = (
        checkpoint.objects.create(tree_size=n, root_hash=bytes(32), note=f"note {n}")
        for n in (1, 2)
    )
    delivery.objects.create(checkpoint=first, target=WITH_TOKEN)
    delivery.objects.create(checkpoint=second, target=WITH_TOKEN)
    delivery.objects.create(checkpoint=second, target=PLAIN)

    new = migrate(latest())
    rows = new.get_model("audit", "LogCheckpointDelivery").objects
    named = witness_target(WITH_TOKEN)
    assert "s3cret" not in named and "pw" not in named
    assert sorted(rows.values_list("checkpoint__tree_size", "target")) == [
        (1, named),
        (2, PLAIN),
        (2, named),
    ]
