"""Settings of the test project; the database and the broker come from the environment."""

from __future__ import annotations

import os

import pymysql

# Django's MySQL backend speaks through PyMySQL, which the bridge's mysql extra installs.
pymysql.install_as_MySQLdb()

SECRET_KEY = "only-for-the-tests"
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "tests.django_site.urls"
STATIC_URL = "/static/"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "bridge.contrib.django",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {
    "default": {
        "ENGINE": os.environ["SITE_DB_ENGINE"],
        "NAME": os.environ["SITE_DB_NAME"],
        "USER": os.environ.get("SITE_DB_USER", ""),
        "PASSWORD": os.environ.get("SITE_DB_PASSWORD", ""),
        "HOST": os.environ.get("SITE_DB_HOST", ""),
        "PORT": os.environ.get("SITE_DB_PORT", ""),
    }
}
DATABASE_ROUTERS = ["bridge.contrib.django.router.BridgeRouter"]

CELERY_BROKER_URL = os.environ["SITE_BROKER_URL"]
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("SITE_QUEUE", "celery")
