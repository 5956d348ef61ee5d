"""The embedded default's broker: kombu's filesystem transport, with a message written whole.

kombu's filesystem channel creates a message's file under its final name in the queue folder
and only then writes the body into it. A consumer polling the folder can move and read the
file in between: it reads an empty or half-written body, fails to decode it, and the message
is gone (its file was already removed). `make run`'s worker died of exactly that once.

Here a message is written under a name the consumer does not pick up (it matches only names
ending in ``.<queue>.msg``) and renamed into place when whole; a rename within one folder is
atomic, so a consumer sees either no file or the full message. Registering the transport under
kombu's own ``filesystem`` alias keeps ``CELERY_BROKER_URL=filesystem://`` what an operator
writes (docs/subsystems/relay.md, "The embedded default's broker").
"""

from __future__ import annotations

import contextlib
import os
import uuid
from time import monotonic
from typing import Any

from kombu import transport as kombu_transport
from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

ALIAS = "filesystem"
#: Where a message is while it is being written: beside its final name, so the rename stays
#: within one folder (and one filesystem).
WRITING_SUFFIX = ".writing"


class Channel(filesystem.Channel):
    # kombu's abstract channel names the second argument ``message`` and its filesystem channel
    # ``payload``: no signature matches both, so this one matches the class it replaces.
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """Put a message onto ``queue``: written whole under a staging name, then renamed."""
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        staging = final + WRITING_SUFFIX
        try:
            with open(staging, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(staging, final)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(staging)
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel


def register() -> None:
    """Make ``filesystem://`` URLs use this transport in this process."""
    kombu_transport.TRANSPORT_ALIASES[ALIAS] = f"{__name__}:Transport"
    # kombu caches a resolved alias; drop a resolution made before this call.
    kombu_transport._transport_cache.pop(ALIAS, None)
