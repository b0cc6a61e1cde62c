"""Exceptions raised by framework-m; each message names the problem in one line."""

from __future__ import annotations


class FrameworkMError(Exception):
    """Base class of every error framework-m raises on purpose."""


class ConfigurationError(FrameworkMError):
    """A setting, option or combination of settings is invalid."""


class ScheduleError(ConfigurationError):
    """A schedule is invalid: bad cron expression, unknown time zone, bad interval."""


class JobDefinitionError(ConfigurationError):
    """A job is registered wrongly: duplicate name, non-async handler, bad limits."""


class AppLoadError(ConfigurationError):
    """The application given by ``--app``/``M_APP`` cannot be imported or found."""


class UnknownBrokerError(ConfigurationError):
    """No installed adapter provides the broker URL's scheme."""


class NotFoundError(FrameworkMError, LookupError):
    """What a command names is not there: a job or schedule nobody knows, or a queue
    without its schema or without a replica that ever ran on it."""


class InvalidJobError(FrameworkMError):
    """An enqueue was refused before anything was sent (bad name or non-JSON kwargs)."""


class InvalidLeaseError(FrameworkMError):
    """A lease call was refused before anything was sent (bad key, holder, ttl or limit)."""


class InvalidStateError(FrameworkMError):
    """A state call was refused before anything was sent (bad key, value or version)."""


class InvalidMemoError(FrameworkMError):
    """A memo call was refused before anything was sent (bad key, value or ttl)."""


class InvalidRecordError(FrameworkMError):
    """A store call was refused before anything was sent (bad key, value, version, ttl
    or timeout)."""


class MessageDecodeError(FrameworkMError):
    """Bytes taken from a broker are not a framework-m job message."""


class SchemaConflictError(FrameworkMError):
    """The broker's existing configuration differs in a way that cannot be migrated in place."""


class BrokerError(FrameworkMError):
    """A broker operation failed (connection lost, server refused, timeout)."""


class DeliveryLostError(BrokerError):
    """The delivery's reservation ended with its connection: the broker delivers it again.

    Raised by ``ack``/``retry``/``dead_letter``/``release`` when retrying cannot help.
    """


class SchemaMissingError(BrokerError):
    """What schema sync creates is gone (a broker restarted without persistence, a queue
    deleted by hand): a worker allowed to sync the schema syncs it again.

    Raised by ``receive`` when the broker says so, never for a passing outage.
    """


class WorkerFailedError(FrameworkMError):
    """A part of the worker (the ticker, the consumer) died; the worker stopped because of it."""


class JobResultError(FrameworkMError):
    """``wait_result`` found no value to return: the job failed, was cancelled, or is
    unknown. ``status`` is the job's status as read (None when unknown)."""

    def __init__(self, message: str, status: object = None) -> None:
        super().__init__(message)
        self.status = status


class JobFailedError(JobResultError):
    """The job failed: out of attempts, or not runnable; ``error`` says why."""

    def __init__(self, message: str, status: object = None, error: str | None = None) -> None:
        super().__init__(message, status)
        self.error = error


class JobCancelledError(JobResultError):
    """The job will not run (cancelled, skipped or expired)."""


class UnknownJobError(JobResultError):
    """No status of the job is kept: never enqueued, kept none, or its status expired."""


class ResultTimeoutError(FrameworkMError, TimeoutError):
    """``wait_result`` timed out with the job not finished; ``status`` is the last read."""

    def __init__(self, message: str, status: object = None) -> None:
        super().__init__(message)
        self.status = status
