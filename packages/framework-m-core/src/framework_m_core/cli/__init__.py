"""The ``m`` command (:mod:`.main`) and what it reads off a broker (:mod:`.inspection`)."""

from .main import main

__all__ = ["main"]
