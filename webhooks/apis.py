from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import NotFound
from core.permissions import EVERY_ROLE

from .selectors import (
    inbox_event_get,
    inbox_event_held_reason,
    inbox_event_status_message,
)


class InboxEventDetailApi(APIView):
    """What became of one delivered event: ``GET /api/webhooks/<slug>/events/<event_id>/``."""

    read_roles = EVERY_ROLE

    @extend_schema_serializer(component_name="InboxEventStatus")
    class OutputSerializer(serializers.Serializer):
        event_id = serializers.CharField()
        event_type = serializers.CharField()
        processing_status = serializers.CharField()
        attempts = serializers.IntegerField()
        received_at = serializers.DateTimeField()
        processed_at = serializers.DateTimeField(allow_null=True)
        delivery_count = serializers.IntegerField()
        # One fixed message per outcome, never the stored error text.
        error_message = serializers.SerializerMethodField()

        # Whether the event waits because its source is paused (docs/http-api.md).
        held = serializers.SerializerMethodField()
        held_reason = serializers.SerializerMethodField()

        def get_error_message(self, event) -> str:
            return inbox_event_status_message(event=event)

        def get_held(self, event) -> bool:
            return bool(inbox_event_held_reason(event=event))

        def get_held_reason(self, event) -> str:
            return inbox_event_held_reason(event=event)

    serializer_class = OutputSerializer

    def get(self, request, slug: str, event_id: str):
        event = inbox_event_get(source_slug=slug, event_id=event_id)
        if event is None:
            raise NotFound()
        return Response(self.OutputSerializer(event).data)
