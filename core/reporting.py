import re

from django.views.debug import SafeExceptionReporterFilter


class SecretsHidingExceptionReporterFilter(SafeExceptionReporterFilter):
    """Django's filter also hides connection URLs (they carry passwords) and credentials in
    request headers, in error pages and error reports alike."""

    hidden_settings = re.compile(
        r"API|TOKEN|KEY|SECRET|PASS|SIGNATURE|HTTP_COOKIE|AUTHORIZATION|_URL|DATABASES|BROKER",
        flags=re.IGNORECASE,
    )

    def is_active(self, request) -> bool:
        # Django's filter stands down while DEBUG is on. What the code marks sensitive (the
        # secret typed into the rotation form, the locals of the services that take a
        # secret) stays hidden on the debug page too: a DEBUG left on must not show it.
        return True
