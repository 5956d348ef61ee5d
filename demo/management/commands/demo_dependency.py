from django.core.management.base import BaseCommand, CommandError

from core.actors import Actor
from core.errors import ServiceError
from demo.services import demo_dependency_switch


class Command(BaseCommand):
    help = (
        "Switch a demo dependency down (the demo integration's events fail, retry, then "
        "are dead-lettered) or back up (replay them then); an operator action recorded "
        "under the invoking OS user."
    )

    def add_arguments(self, parser):
        parser.add_argument("state", choices=["down", "up"])
        parser.add_argument("name", help="the dependency (search-index)")
        parser.add_argument(
            "--reason", required=True, help="recorded with the operator action"
        )

    def handle(self, *args, state, name, reason, **options):
        try:
            action = demo_dependency_switch(
                name=name, up=state == "up", actor=Actor.command(), reason=reason
            )
        except ServiceError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"demo dependency {name!r} is {state} (operator action #{action.pk})"
        )
