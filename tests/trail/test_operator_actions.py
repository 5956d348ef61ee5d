"""The one recorder of operator actions: the actor's name and user as given, the inbox rows it
names, and details of the action's declared shape (docs/architecture.md, "Adding an operator
action")."""

import pathlib

import pytest

from core.actors import Actor
from trail.models import OperatorAction
from trail.services import (
    DETAILS_SHAPES,
    RotateSecretDetails,
    operator_action_record,
)

pytestmark = pytest.mark.django_db

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_an_action_records_the_actor_the_rows_and_its_details():
    action = operator_action_record(
        action=OperatorAction.Action.ROTATE_SECRET,
        actor=Actor(name="os:oncall"),
        reason="leaked",
        details=RotateSecretDetails(source="papers", grace_seconds=60),
    )
    stored = OperatorAction.objects.get(pk=action.pk)
    assert (stored.actor, stored.actor_name, stored.reason) == (
        None,
        "os:oncall",
        "leaked",
    )
    assert stored.details == {"source": "papers", "grace_seconds": 60}
    assert (stored.event_ids, stored.event_count) == ([], 0)

    replay = operator_action_record(
        action=OperatorAction.Action.REPLAY,
        actor=Actor.system(),
        event_ids=[3, 5],
        skipped_count=1,
        details={"previous": {}},
    )
    assert (replay.event_ids, replay.event_count, replay.skipped_count) == (
        [3, 5],
        2,
        1,
    )


@pytest.mark.parametrize(
    "details",
    [
        {"source": "papers"},  # a key missing
        {"source": "papers", "grace_seconds": 60, "secret": "x"},  # one unknown
    ],
)
def test_details_of_another_shape_are_refused_and_nothing_is_recorded(details):
    with pytest.raises(TypeError, match="rotate_secret"):
        operator_action_record(
            action=OperatorAction.Action.ROTATE_SECRET,
            actor=Actor.system(),
            details=details,
        )
    assert not OperatorAction.objects.exists()


def test_every_action_has_a_declared_shape():
    assert set(DETAILS_SHAPES) == set(OperatorAction.Action.values)


def test_operator_actions_are_written_by_the_recorder_only():
    """The product writes ``OperatorAction`` rows in one place: a new action goes through
    the recorder, its actor and its details' shape."""
    writers = []
    for path in ROOT.rglob("*.py"):
        relative = path.relative_to(ROOT)
        if relative.parts[0] in {".venv", "tests", "bench", "chaos"}:
            continue
        if "migrations" in relative.parts:  # history: the rows an upgrade carried over
            continue
        if "OperatorAction.objects.create" in path.read_text():
            writers.append(str(relative))
    assert writers == ["trail/services.py"]
