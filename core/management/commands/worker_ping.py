import time
import uuid

from django.core.management.base import BaseCommand, CommandError

from core.models import WorkerHeartbeat
from core.tasks import heartbeat_task


class Command(BaseCommand):
    help = "Send a task through the broker and wait until a worker has written it to the database."

    def add_arguments(self, parser):
        parser.add_argument("--timeout", type=float, default=30.0)

    def handle(self, *args, timeout, **options):
        token = uuid.uuid4().hex
        heartbeat_task.delay(token)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            beat = WorkerHeartbeat.objects.filter(token=token).first()
            if beat is not None:
                self.stdout.write(f"worker {beat.hostname} answered")
                return
            time.sleep(0.2)
        raise CommandError(f"no worker answered within {timeout:g}s")
