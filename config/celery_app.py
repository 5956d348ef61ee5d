import os

from celery import Celery
from kombu.utils.objects import cached_property

from core import broker

# A forgotten DJANGO_SETTINGS_MODULE means production (DEBUG off, no published key), as
# cookiecutter-django does: only manage.py and `make run` default to the local settings.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.production")
# `filesystem://` (the embedded default's broker) writes a message whole before a consumer can
# see it (docs/subsystems/relay.md, "The embedded default's broker").
broker.register()


class App(Celery):
    @cached_property
    def Worker(self):
        """``celery worker`` runs ``config.celery_worker.Worker``, which sets up the folder
        its pool processes share their metrics in before anything else."""
        return self.subclass_with_self("config.celery_worker:Worker")


app = App("config")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Every worker runs an outbox relay (core.relay.loop): committed work reaches the workers with no
# broker call on the request path, and with beat stopped.
app.steps["worker"].add("core.relay.loop:RelayStep")
