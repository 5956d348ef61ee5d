import os

import django
from django.core.exceptions import ImproperlyConfigured
from django.core.handlers.wsgi import WSGIHandler

# A forgotten DJANGO_SETTINGS_MODULE means production (DEBUG off, no published key), as
# cookiecutter-django does: only manage.py and `make run` default to the local settings.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.production")
# A process that serves this application is a web process: its waits for the database are
# bounded (config/settings/_helpers.py, database_timeouts_apply).
os.environ.setdefault("APP_PROCESS", "web")

# What get_wsgi_application does, with the tracer provider started in between (when
# OTEL_EXPORTER_OTLP_ENDPOINT is set; core/tracing.py): once per process that loads this
# module, so once per gunicorn worker, after its fork (the configuration preloads nothing),
# and before the handler loads the middleware, which the Django instrumentation adds to.
django.setup(set_prefix=False)

from core.tracing import tracing_start  # noqa: E402 - the settings first

tracing_start(process="web")
application = WSGIHandler()

if os.environ.get("SERVER_SOFTWARE", "").startswith("gunicorn/"):
    from core.metrics_dir import metrics_shared

    # gunicorn without the repository's gunicorn.conf.py: each worker would count alone
    # and /metrics would answer one worker's share. Refused, whatever the worker count.
    if not metrics_shared():
        raise ImproperlyConfigured(
            "gunicorn started without the repository's gunicorn.conf.py, so its workers "
            "do not share their metrics: start it at the repository root (gunicorn reads "
            "gunicorn.conf.py from its working directory) or with "
            "-c <repository>/gunicorn.conf.py."
        )
