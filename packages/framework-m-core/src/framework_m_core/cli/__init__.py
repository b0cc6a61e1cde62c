"""The ``m`` command (:mod:`.main`), one module per command: :mod:`.worker`,
:mod:`.schedules`, :mod:`.enqueue`, :mod:`.schema`, :mod:`.status`, :mod:`.jobs`,
:mod:`.deadletters`, :mod:`.console`; what they share is in :mod:`.options`."""

from .main import main

__all__ = ["main"]
