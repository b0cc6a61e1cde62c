"""A Django project whose tasks run on framework-m (see README.md beside it)."""

import os
from urllib.parse import unquote, urlsplit

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


def _database(url: str) -> dict[str, str]:
    """``postgresql://user:password@host:port/name`` as a Django database."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError(f"SHOP_DATABASE_URL: a postgresql:// URL, got {parts.scheme}://")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parts.path.lstrip("/"),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }


# With a database, tasks are enqueued through the outbox: a row in the view's
# transaction, relayed by `m worker --outbox-url` (the same database).
if os.environ.get("SHOP_DATABASE_URL"):
    DATABASES = {"default": _database(os.environ["SHOP_DATABASE_URL"])}
    TASKS["default"]["OPTIONS"]["outbox"] = "default"
