"""A Django project with the bridge's app, as a user's would be: its Celery app loaded with
Django (Celery's own Django pattern), its settings from the environment of the test."""

from tests.django_site.celery_app import app

__all__ = ["app"]
