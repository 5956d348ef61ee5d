from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView


class WhoAmIApi(APIView):
    """The API client the Bearer token belongs to: lets a CI system check its token."""

    @extend_schema(
        responses=inline_serializer(
            "WhoAmI", fields={"client": serializers.CharField()}
        )
    )
    def get(self, request):
        return Response({"client": request.user.name})
