"""The optional promises of the ports, which an adapter declares when it keeps them."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from ..errors import ConfigurationError


class Capability(StrEnum):
    """An optional promise of :class:`~.protocols.BrokerProtocol`.

    An adapter lists those it keeps in its ``capabilities``; the contract suite
    checks every declared one and skips, with the reason, the tests of the rest.
    The docs' "Writing an adapter" page has the table of capabilities and the
    tests each one gates.
    """

    #: ``dead_letters()`` reads back what ``dead_letter()`` stored.
    DEAD_LETTER_INSPECTION = "dead_letter_inspection"
    #: Deliveries reserved by a consumer that closes are delivered again at once,
    #: not after the visibility timeout.
    REDELIVER_ON_CLOSE = "redeliver_on_close"
    #: Deliveries reserved over a connection that drops without a goodbye (its process
    #: was killed) are delivered again at once, not after the visibility timeout.
    REDELIVER_ON_DISCONNECT = "redeliver_on_disconnect"
    #: Every process that opens the same URL reaches the same queue, so several
    #: ``m worker`` replicas share it and ``m enqueue`` from another process works.
    CROSS_PROCESS = "cross_process"
    #: A deduplication id reused after the window gets a new job id. Brokers that
    #: cannot say which message they kept derive the id from the deduplication id.
    NEW_ID_AFTER_WINDOW = "new_id_after_window"
    #: A released delivery comes back with the same ``attempt``: a release is
    #: not counted as an attempt.
    UNCOUNTED_RELEASE = "uncounted_release"
    #: A message that reaches the broker after its ``not_after`` is never run: the
    #: broker refuses to store it, or its deliveries say when it was stored.
    STORE_DEADLINE = "store_deadline"
    #: ``waiting()`` lists the messages held and handed out to no consumer.
    WAITING_INSPECTION = "waiting_inspection"
    #: ``waiting()`` lists, besides those never handed out, retries waiting out their
    #: delay and released deliveries (a broker whose consumer holds them cannot).
    RETRY_INSPECTION = "retry_inspection"
    #: ``remove_dead_letters()`` deletes dead letters that ``dead_letters()`` returned.
    DEAD_LETTER_REMOVAL = "dead_letter_removal"
    #: ``queue_stats()`` reports the broker's own counts of ready messages and dead letters.
    QUEUE_STATS = "queue_stats"
    #: ``enqueue_at()`` and ``enqueue_in()`` hold a job until it is due.
    DELAYED_ENQUEUE = "delayed_enqueue"
    #: The queue keeps its dedup window (rather than each enqueue carrying its own): a
    #: URL asking for another window plans a change (migrated or refused), and every
    #: connected replica reports the window the queue keeps, whatever its URL says.
    STORED_DEDUP_WINDOW = "stored_dedup_window"
    #: ``store`` keeps records in the broker, shared by every process: versioned,
    #: written by compare-and-set, expiring, watched (:mod:`framework_m_core.ports.store`).
    #: Core builds the control plane on it (:mod:`framework_m_core.control`): leases for
    #: ``overlap=`` and ``concurrency=``, pauses, catch-up, runtime schedules, job
    #: statuses, results and cancels.
    STORE = "store"

    @property
    def promise(self) -> str:
        """The promise, in one sentence."""
        return _PROMISES[self]


_PROMISES = {
    Capability.DEAD_LETTER_INSPECTION: "dead_letters() reads back what dead_letter() stored",
    Capability.REDELIVER_ON_CLOSE: "a consumer that closes releases its deliveries at once",
    Capability.REDELIVER_ON_DISCONNECT: (
        "deliveries of a connection that drops (a killed process) come back at once"
    ),
    Capability.CROSS_PROCESS: "every process that opens the URL reaches the same queue",
    Capability.NEW_ID_AFTER_WINDOW: "an id reused after the window gets a new job id",
    Capability.UNCOUNTED_RELEASE: "a release is not counted as an attempt",
    Capability.STORE_DEADLINE: "a message stored after its not_after never runs",
    Capability.DEAD_LETTER_REMOVAL: "remove_dead_letters() deletes what dead_letters() returned",
    Capability.WAITING_INSPECTION: "waiting() lists what waits for a consumer, taking nothing",
    Capability.RETRY_INSPECTION: "waiting() lists retries and released deliveries too",
    Capability.QUEUE_STATS: "queue_stats() counts ready, reserved and dead messages",
    Capability.DELAYED_ENQUEUE: "enqueue_at()/enqueue_in() hold a job until it is due",
    Capability.STORED_DEDUP_WINDOW: (
        "the queue keeps its dedup window; every replica reports the one it keeps"
    ),
    Capability.STORE: "records in the broker: compare-and-set, expiring, watched, claimed",
}


def as_capabilities(declared: Iterable[object], owner: str) -> frozenset[Capability]:
    """``declared`` as capabilities; an unknown one is a :class:`ConfigurationError`."""
    known = {c.value: c for c in Capability}
    out = set()
    for item in declared:
        if not isinstance(item, str) or item not in known:
            raise ConfigurationError(
                f"{owner} declares unknown capability {item!r} (known: {', '.join(known)})"
            )
        out.add(known[item])
    return frozenset(out)
