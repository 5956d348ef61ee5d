import re

from django.views.debug import SafeExceptionReporterFilter


class SecretsHidingExceptionReporterFilter(SafeExceptionReporterFilter):
    """Django's filter also hides connection URLs (they carry passwords) and credentials in
    request headers, in error pages and error reports alike."""

    hidden_settings = re.compile(
        r"API|TOKEN|KEY|SECRET|PASS|SIGNATURE|HTTP_COOKIE|AUTHORIZATION|_URL|DATABASES|BROKER",
        flags=re.IGNORECASE,
    )
