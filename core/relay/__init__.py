"""The outbox relay: moves committed work from the database to the workers
(docs/subsystems/relay.md).

A request that accepts work commits one row and answers; it never talks to the broker. Each
app registers its outboxes from its ``AppConfig.ready`` (``outbox.outbox_register``), and a
relay in every Celery worker (``loop.RelayStep``) claims the waiting rows with ``FOR UPDATE
SKIP LOCKED``, stamps them dispatched, publishes their messages and commits; a sweep
publishes again what may have been lost. The modules:

- ``outbox``: ``Outbox`` (what an app subclasses), ``Publication``, the register, and one
  round of one outbox (``relay_round``);
- ``loop``: ``Relay``, the rounds over every outbox with their flow control, held groups and
  adaptive polling, and the worker's ``RelayStep``;
- ``lock``: the PostgreSQL advisory lock that lets one relay publish at a time;
- ``state``: whether the relays keep up (``/metrics`` and ``/readyz``).

The database, not a notification, says what is waiting, so a lost wake-up cannot exist.
"""
