"""What an attacker with database access does, for the sealed-trail tests: raw SQL."""

import pytest
from django.core.management import CommandError, call_command
from django.db import connection


def sql(statement, params=()):
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def verify_fails(capsys, *args):
    """Runs ``audit_verify``, which must fail, and returns what it wrote to stderr."""
    with pytest.raises(CommandError, match="FAILED"):
        call_command("audit_verify", *args)
    return capsys.readouterr().err
