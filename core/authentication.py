from rest_framework import authentication, exceptions

from .selectors import api_client_by_token


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer <token>`` of an API client. The authenticated principal
    (``request.user``) is the ``ApiClient``."""

    keyword = "Bearer"

    def authenticate(self, request):
        # Once per request, whoever asks first (DRF, or a view's own short way before it).
        raw = getattr(request, "_request", request)
        if hasattr(raw, "_bearer_authenticated"):
            return raw._bearer_authenticated
        raw._bearer_authenticated = found = self._authenticate(request)
        return found

    def _authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed()
        try:
            token = header[1].decode("ascii")
        except UnicodeDecodeError as exc:
            raise exceptions.AuthenticationFailed() from exc
        client = api_client_by_token(token=token)
        if client is None:
            raise exceptions.AuthenticationFailed()
        return client, None

    def authenticate_header(self, request) -> str:
        return self.keyword
