"""Read APIs (docs/http-api.md, "Read APIs"): thin views over the selectors, Bearer auth,
cursor pages."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_serializer,
)
from rest_framework import serializers
from rest_framework.generics import ListAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from core.fields import BooleanTextField, InstantBoundField
from core.pagination import CursorPage
from core.permissions import EVERY_ROLE
from core.schema import ERROR_REF

from .selectors import (
    document_revision_list,
    research_document_get,
    research_document_list,
)


class CitationOutputSerializer(serializers.Serializer):
    text = serializers.CharField()
    reference_url = serializers.CharField()


class DocumentOutputSerializer(serializers.Serializer):
    entity_id = serializers.CharField()
    current_source_version = serializers.IntegerField(allow_null=True)
    source_url = serializers.CharField()
    source_content_hash = serializers.CharField()
    title = serializers.CharField()
    summary = serializers.CharField()
    authors = serializers.ListField(child=serializers.CharField())
    citations = CitationOutputSerializer(many=True)
    published_at = serializers.DateTimeField(allow_null=True)
    is_deleted = serializers.BooleanField()
    last_event_id = serializers.CharField()
    updated_at = serializers.DateTimeField()


class DocumentListApi(ListAPIView):
    """``GET /api/research/documents/``: filters ``is_deleted`` (true|false) and
    ``updated_since`` (RFC 3339)."""

    read_roles = EVERY_ROLE

    serializer_class = DocumentOutputSerializer

    class FilterSerializer(serializers.Serializer):
        is_deleted = BooleanTextField(required=False, default=None)
        updated_since = InstantBoundField(required=False, default=None)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "is_deleted", bool, description="`true` or `false`, nothing else."
            ),
            OpenApiParameter(
                "updated_since",
                OpenApiTypes.DATETIME,
                description="RFC 3339 (without an offset, UTC): the documents updated at "
                "or after it.",
            ),
        ],
        responses={
            200: DocumentOutputSerializer(many=True),
            422: OpenApiResponse(
                response=ERROR_REF,
                description="`invalid_payload`: a filter or `page_size` is not valid "
                "(`details` names it).",
            ),
        },
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        # A plain dict, not the QueryDict: DRF reads an empty form value as not given, and
        # ``?updated_since=`` is no more a date-time than ``?updated_since=x``.
        filters = self.FilterSerializer(data=self.request.query_params.dict())
        filters.is_valid(raise_exception=True)
        return research_document_list(**filters.validated_data)


class DocumentDetailApi(APIView):
    """``GET /api/research/documents/<entity_id>/``: a tombstone answers 200 with
    ``is_deleted: true``; an unknown document 404 ``not_found``."""

    read_roles = EVERY_ROLE

    @extend_schema(responses=DocumentOutputSerializer)
    def get(self, request, entity_id: str):
        document = research_document_get(entity_id=entity_id)
        return Response(DocumentOutputSerializer(document).data)


class RevisionPage(CursorPage):
    ordering = "id"  # oldest first: revisions are appended in the order they applied


class DocumentRevisionListApi(ListAPIView):
    """``GET /api/research/documents/<entity_id>/revisions/``, oldest first."""

    read_roles = EVERY_ROLE

    pagination_class = RevisionPage

    @extend_schema_serializer(component_name="DocumentRevision")
    class OutputSerializer(serializers.Serializer):
        source_version = serializers.IntegerField(allow_null=True)
        event_id = serializers.CharField()
        content_hash = serializers.CharField()
        applied_at = serializers.DateTimeField()

    serializer_class = OutputSerializer

    def get_queryset(self):
        return document_revision_list(entity_id=self.kwargs["entity_id"])
