"""The flush that ends a test with ``transaction=True`` (tests/conftest.py) leaves the next test
the content types and permissions that ``post_migrate`` creates: kept when no test changed them,
created again when one did."""

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command

pytestmark = pytest.mark.django_db(transaction=True)


def flush():
    """The flush of a test's teardown, as Django runs it."""
    call_command("flush", verbosity=0, interactive=False, reset_sequences=False)


def rows():
    return (
        sorted(ContentType.objects.values_list("pk", "app_label", "model")),
        sorted(Permission.objects.values_list("pk", "content_type__model", "codename")),
    )


def names():
    """The rows without their ids: what post_migrate creates."""
    return (
        sorted(ContentType.objects.values_list("app_label", "model")),
        sorted(Permission.objects.values_list("content_type__app_label", "codename")),
    )


def test_unchanged_content_types_and_permissions_are_kept():
    flush()  # after this one they are as post_migrate leaves them
    before = rows()

    flush()

    assert rows() == before
    assert Permission.objects.filter(codename="replay_inboxevent").exists()


def test_a_permission_a_test_deleted_is_created_again():
    flush()
    created = names()
    deleted, _ = Permission.objects.filter(codename="replay_inboxevent").delete()
    assert deleted >= 1

    flush()

    assert names() == created
    assert Permission.objects.filter(codename="replay_inboxevent").exists()


def test_a_content_type_a_test_added_is_gone():
    flush()
    created = names()
    ContentType.objects.create(app_label="gone", model="oldmodel")

    flush()

    assert names() == created
    assert not ContentType.objects.filter(app_label="gone").exists()


def test_a_permission_a_test_renamed_is_created_again():
    flush()
    created = names()
    renamed = Permission.objects.filter(codename="replay_inboxevent")
    assert renamed.update(codename="renamed") == 1

    flush()

    assert names() == created
