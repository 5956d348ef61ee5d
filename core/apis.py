from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.permissions import EVERY_ROLE


class WhoAmIApi(APIView):
    """The API client the Bearer token belongs to: lets a CI system check its token."""

    read_roles = EVERY_ROLE

    @extend_schema(
        responses=inline_serializer(
            "WhoAmI",
            fields={
                "client": serializers.CharField(),
                "role": serializers.CharField(),
            },
        )
    )
    def get(self, request):
        return Response({"client": request.user.name, "role": request.user.role})
