"""Who did something: the one value every operator action, and every ``*_by`` / ``*_by_name``
pair of columns, is filled from (docs/architecture.md, "Adding an operator action").

An actor is built once where the request or the command starts (``Actor.of(request.user)``
in the admin, ``Actor.command()`` in a management command, ``Actor.api_client(client)`` in
the operator API, ``Actor.system()`` for work no
person asked for) and handed to the services, which never work the name out themselves."""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django.contrib.auth.models import User

SYSTEM_NAME = "system"
COMMAND_PREFIX = "os:"
API_CLIENT_PREFIX = "api:"


def _os_login() -> str:
    """The login of the person running this process: the real user id's name (not
    ``LOGNAME`` or ``USER``, which any caller sets as it likes), or, for a process run as
    root through ``sudo``, the user who ran ``sudo`` (``SUDO_USER``, which only root's
    environment can hold, as root could write anything anyway)."""
    uid = os.getuid()
    sudo_user = os.environ.get("SUDO_USER", "").strip()
    if uid == 0 and sudo_user and os.environ.get("SUDO_UID"):
        return sudo_user
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # a uid with no entry (a container started with --user 1234)
        return f"uid {uid}"


@dataclass(frozen=True)
class Actor:
    """The name is kept as text on every record, so that the record reads the same after the
    user is renamed or deleted; ``user`` is the admin user, when there is one."""

    name: str
    user: User | None = None

    @classmethod
    def of(cls, user: User) -> Actor:
        """An admin user (``request.user``)."""
        return cls(name=user.get_username(), user=user)

    @classmethod
    def command(cls) -> Actor:
        """The person running a management command from a shell: ``os:<login>``."""
        return cls(name=f"{COMMAND_PREFIX}{_os_login()}")

    @classmethod
    def api_client(cls, client: Any) -> Actor:
        """An API client of the operator API (``core.models.ApiClient``): ``api:<name>``."""
        return cls(name=f"{API_CLIENT_PREFIX}{client.name}")

    @classmethod
    def system(cls) -> Actor:
        """Work no person asked for."""
        return cls(name=SYSTEM_NAME)

    def columns(self, prefix: str) -> dict[str, Any]:
        """The model's ``<prefix>`` and ``<prefix>_name`` columns (``paused_by``,
        ``paused_by_name``), as an update or a constructor takes them."""
        return {prefix: self.user, f"{prefix}_name": self.name[:255]}
