"""Schedules and the ticker: when each slot is due, and its enqueue on every replica.

:mod:`.schedules` (``cron()`` and ``every()``), the cron dialect (:mod:`.cron`),
time zones and DST (:mod:`.zones`), the check of this replica's clock against the
broker's (:mod:`.clocks`), and :class:`~.ticker.Ticker`.
"""
