from celery import shared_task  # noqa: F401
