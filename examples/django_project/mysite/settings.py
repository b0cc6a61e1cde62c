"""A Django project whose tasks run on framework-m (see README.md beside it)."""

import os

SECRET_KEY = "example-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
INSTALLED_APPS = ["shop"]
ROOT_URLCONF = "mysite.urls"
DATABASES: dict[str, dict[str, str]] = {}

TASKS = {
    "default": {
        "BACKEND": "framework_m_django.TaskBackend",
        "OPTIONS": {"broker_url": os.environ.get("M_BROKER_URL", "redis://127.0.0.1:6379/0")},
    }
}
