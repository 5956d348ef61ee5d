"""Who an operator action names: an admin user by username, a command by the real user of
its process (never what the environment says of it), work no one asked for as ``system``."""

import os
import pwd

import pytest
from django.contrib.auth import get_user_model

from core.actors import Actor


@pytest.mark.django_db
def test_an_admin_user_is_named_by_username_and_kept():
    user = get_user_model().objects.create_user("alice")
    actor = Actor.of(user)
    assert (actor.name, actor.user) == ("alice", user)
    assert actor.columns("paused_by") == {"paused_by": user, "paused_by_name": "alice"}


def test_a_command_is_its_process_real_user_whatever_the_environment_says(monkeypatch):
    monkeypatch.setenv("LOGNAME", "mallory")
    monkeypatch.setenv("USER", "mallory")
    monkeypatch.delenv("SUDO_USER", raising=False)
    actor = Actor.command()
    assert actor.name == f"os:{pwd.getpwuid(os.getuid()).pw_name}"
    assert actor.user is None


def test_a_command_run_through_sudo_names_who_ran_sudo(monkeypatch):
    monkeypatch.setenv("SUDO_USER", "alice")
    monkeypatch.setenv("SUDO_UID", "1000")
    expected = "os:alice" if os.getuid() == 0 else f"os:{pwd.getpwuid(os.getuid())[0]}"
    # Only a process that really runs as root can have been started by sudo: elsewhere the
    # variable is whatever the caller set, and the real user is named.
    assert Actor.command().name == expected


def test_system_is_no_user():
    assert Actor.system() == Actor(name="system", user=None)
