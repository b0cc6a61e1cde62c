"""Deliberate bugs, one per promise of the ports, for the mutation run (``mutation/run.py``).

Each mutant edits one adapter's source (exact text, found exactly once) and names
the contract tests expected to catch it. The run applies it to a copy of the
tree and runs those tests of the adapter's own hook-up: a failing test kills it.
"""

from __future__ import annotations

from dataclasses import dataclass

CORE = "packages/framework-m-core/src/framework_m_core"
MEMORY = f"{CORE}/adapters/memory"
REDIS = "packages/adapter-redis/src/framework_m_redis"
SQLITE = "examples/adapter-sqlite/src/framework_m_sqlite"

# The contract suite's hook-up of each adapter.
SUITES = {
    "memory": "packages/framework-m-core/tests/test_contract_memory.py",
    "redis": "packages/adapter-redis/tests/test_contract_redis.py",
    "sqlite": "examples/adapter-sqlite/tests/test_contract_sqlite.py",
}


@dataclass(frozen=True)
class Mutant:
    id: str
    adapter: str  # the key of SUITES whose suite must kill it
    promise: str
    file: str
    edits: tuple[tuple[str, str], ...]  # (text found exactly once, replacement)
    tests: tuple[str, ...]  # test names (pytest -k) expected to fail


def m(id: str, adapter: str, promise: str, file: str, old: str, new: str, *tests: str) -> Mutant:
    return Mutant(id, adapter, promise, file, ((old, new),), tests)


MUTANTS: tuple[Mutant, ...] = (
    # -- the shared half (core), run on memory:// ----------------------------------------
    m(
        "core-validation",
        "memory",
        "invalid jobs are refused before sending",
        f"{CORE}/broker.py",
        "job_name=validate_job_name(job_name),",
        "job_name=job_name,",
        "test_an_invalid_job_is_refused",
    ),
    m(
        "core-count",
        "memory",
        "a duplicate is counted as a duplicate",
        f"{CORE}/broker.py",
        "            self.stats.duplicates += 1\n",
        "            self.stats.enqueued += 1\n",
        "test_a_duplicate_returns",
    ),
    m(
        "core-dry-run",
        "memory",
        "sync_schema(dry_run=True) changes nothing",
        f"{CORE}/broker.py",
        "if dry_run or plan.in_sync:",
        "if plan.in_sync:",
        "test_planning_and_a_dry_run_change_nothing",
    ),
    m(
        "core-last-attempt",
        "memory",
        "the worker dead-letters after max_attempts",
        f"{CORE}/execution.py",
        "elif delivery.attempt >= spec.max_attempts:",
        "elif delivery.attempt > spec.max_attempts:",
        "test_the_last_failed_attempt",
        "test_a_dead_letter_from_the_worker",
    ),
    # -- memory:// -------------------------------------------------------------------------
    m(
        "memory-no-dedup",
        "memory",
        "a duplicate stores nothing",
        f"{MEMORY}/broker.py",
        "original = q.seen(message.deduplication_id, now)",
        "original = None",
        "test_a_duplicate_returns",
        "test_concurrent_publish",
    ),
    m(
        "memory-duplicate-id",
        "memory",
        "a duplicate returns the original's id",
        f"{MEMORY}/broker.py",
        "return PublishResult(original, duplicate=True)",
        "return PublishResult(message.id, duplicate=True)",
        "test_a_duplicate_returns",
        "test_publish_says",
    ),
    m(
        "memory-short-window",
        "memory",
        "an id is a duplicate for the whole window",
        f"{MEMORY}/server.py",
        "expires = now + self.dedup_window",
        "expires = now + self.dedup_window / 4",
        "test_an_id_is_a_duplicate_for_the_whole_window",
    ),
    m(
        "memory-endless-window",
        "memory",
        "after the window the same id stores a new job",
        f"{MEMORY}/server.py",
        "expires = now + self.dedup_window",
        "expires = now + self.dedup_window * 100",
        "test_an_id_is_a_duplicate_for_the_whole_window",
        "test_an_id_reused_after",
    ),
    m(
        "memory-batch-limit",
        "memory",
        "receive never returns more than max_messages",
        f"{MEMORY}/broker.py",
        "while q.ready and len(out) < max_messages:",
        "while q.ready:",
        "test_receive_never_returns_more_than_asked",
    ),
    m(
        "memory-waits-out",
        "memory",
        "receive returns as soon as a delivery is there",
        f"{MEMORY}/broker.py",
        "            if q.ready:\n",
        "            if q.ready and now >= deadline:\n",
        "test_receive_returns_once",
    ),
    m(
        "memory-body",
        "memory",
        "bodies come back byte for byte",
        f"{MEMORY}/broker.py",
        "out.append(Delivery(entry.body, entry.deliveries, tok, entry.stored_at))",
        "out.append(Delivery(entry.body.strip(), entry.deliveries, tok, entry.stored_at))",
        "test_bodies_come_back",
    ),
    m(
        "memory-attempt-zero",
        "memory",
        "the first delivery is attempt 1",
        f"{MEMORY}/broker.py",
        "out.append(Delivery(entry.body, entry.deliveries, tok, entry.stored_at))",
        "out.append(Delivery(entry.body, entry.deliveries - 1, tok, entry.stored_at))",
        "test_the_first_delivery_is_attempt_one",
    ),
    m(
        "memory-no-reservation",
        "memory",
        "a reserved delivery goes to no other consumer",
        f"{MEMORY}/broker.py",
        "q.reserved[tok] = (entry, now + q.visibility_timeout)",
        "q.reserved[tok] = (entry, now)",
        "test_a_reserved_delivery_goes_to_no_other_consumer",
    ),
    m(
        "memory-early-expiry",
        "memory",
        "no redelivery before the visibility timeout",
        f"{MEMORY}/broker.py",
        "q.reserved[tok] = (entry, now + q.visibility_timeout)",
        "q.reserved[tok] = (entry, now + q.visibility_timeout / 2)",
        "test_an_unsettled_delivery_comes_back_after_the_visibility_timeout_not_before",
    ),
    m(
        "memory-ack-keeps",
        "memory",
        "an acked delivery never comes back",
        f"{MEMORY}/broker.py",
        "    async def ack(self, delivery: Delivery) -> None:\n        self._settle(delivery)\n",
        "    async def ack(self, delivery: Delivery) -> None:\n"
        "        self._q.put(self._settle(delivery) or server.Entry(delivery.body))\n",
        "test_an_acked_delivery_never_comes_back",
        "test_the_worker_runs_a_job_then_acks_it",
    ),
    m(
        "memory-retry-now",
        "memory",
        "a retry waits its delay",
        f"{MEMORY}/broker.py",
        "time.monotonic() + max(0.0, delay)",
        "time.monotonic()",
        "test_retry_delivers_again_after_the_delay",
    ),
    m(
        "memory-release-sits",
        "memory",
        "a release hands the delivery back at once",
        f"{MEMORY}/broker.py",
        "    async def release(self, delivery: Delivery) -> None:\n"
        "        entry = self._settle(delivery)\n",
        "    async def release(self, delivery: Delivery) -> None:\n        return\n"
        "        entry = self._settle(delivery)\n",
        "test_release_hands_back_at_once",
    ),
    m(
        "memory-release-counted",
        "memory",
        "a release is not counted as an attempt",
        f"{MEMORY}/broker.py",
        "            entry.deliveries -= 1\n            self._q.put(entry, first=True)\n",
        "            self._q.put(entry, first=True)\n",
        "test_a_release_is_not_counted_as_an_attempt",
    ),
    m(
        "memory-close-keeps",
        "memory",
        "close hands reserved deliveries back",
        f"{MEMORY}/broker.py",
        "        for tok in self._mine:\n",
        "        for tok in ():\n",
        "test_close_hands_reserved_deliveries_back_at_once",
    ),
    m(
        "memory-extend-noop",
        "memory",
        "extend keeps a delivery reserved",
        f"{MEMORY}/broker.py",
        "q.reserved[delivery.handle] = (held[0], time.monotonic() + q.visibility_timeout)",
        "q.reserved[delivery.handle] = held",
        "test_extend_keeps_a_long_job_reserved",
        "test_a_job_running_past",
    ),
    m(
        "memory-settle-twice",
        "memory",
        "settling again changes nothing",
        f"{MEMORY}/broker.py",
        "            if tok in self._settled:\n",
        "            if tok is self._settled:\n",
        "test_settling_again_changes_nothing",
        "test_dead_lettering_again",
    ),
    m(
        "memory-stale-settle",
        "memory",
        "a late settle leaves the redelivery alone",
        f"{MEMORY}/broker.py",
        "        held = q.reserved.pop(tok, None)\n",
        "        held = q.reserved.pop(tok, None) or next(\n"
        "            (q.reserved.pop(t) for t, (e, _) in list(q.reserved.items())"
        " if e.body == delivery.body), None)\n",
        "test_settling_an_expired_reservation",
    ),
    m(
        "memory-dead-body",
        "memory",
        "a dead letter keeps the body",
        f"{MEMORY}/broker.py",
        "DeadLetter(entry.body, reason, delivery.attempt, time.time(), ref=object())",
        "DeadLetter(b'', reason, delivery.attempt, time.time(), ref=object())",
        "test_a_dead_letter_keeps",
    ),
    m(
        "memory-dead-attempts",
        "memory",
        "a dead letter keeps the attempt",
        f"{MEMORY}/broker.py",
        "DeadLetter(entry.body, reason, delivery.attempt, time.time(), ref=object())",
        "DeadLetter(entry.body, reason, 1, time.time(), ref=object())",
        "test_a_dead_letter_keeps",
        "test_a_dead_letter_from_the_worker",
    ),
    m(
        "memory-dead-removal-keeps",
        "memory",
        "removed dead letters are gone",
        f"{MEMORY}/broker.py",
        "kept = [d for d in dead if id(d.ref) not in refs]",
        "kept = list(dead)",
        "test_removed_dead_letters",
    ),
    m(
        "memory-stats-ready-holds-reserved",
        "memory",
        "queue_stats() counts reserved deliveries apart from ready ones",
        f"{MEMORY}/broker.py",
        "ready=len(q.ready),",
        "ready=len(q.ready) + len(q.reserved),",
        "test_queue_stats_count",
    ),
    m(
        "memory-stats-own-only",
        "memory",
        "queue_stats() counts every connection's messages, not this instance's",
        f"{MEMORY}/broker.py",
        "reserved=len(q.reserved),",
        "reserved=len(self._mine),",
        "test_queue_stats_count",
    ),
    m(
        "memory-dead-requeued",
        "memory",
        "a dead letter is never delivered again",
        f"{MEMORY}/broker.py",
        "time.time(), ref=object())\n            )\n",
        "time.time(), ref=object())\n            )\n"
        "            self._q.put_later(entry, time.monotonic() + 0.5)\n",
        "test_a_dead_letter_keeps",
    ),
    m(
        "memory-dead-newest-first",
        "memory",
        "dead letters come oldest first",
        f"{MEMORY}/broker.py",
        "return dead[-limit:] if limit > 0 else []",
        "return dead[::-1][:limit]",
        "test_dead_letters_are_the_latest_oldest_first",
    ),
    m(
        "memory-dead-limit",
        "memory",
        "dead_letters returns at most limit",
        f"{MEMORY}/broker.py",
        "return dead[-limit:] if limit > 0 else []",
        "return dead",
        "test_dead_letters_are_the_latest_oldest_first",
    ),
    m(
        "memory-plan-applies",
        "memory",
        "planning changes nothing",
        f"{MEMORY}/broker.py",
        "        return schema.plan(self.settings)\n",
        "        schema.apply(self.settings)\n        return schema.plan(self.settings)\n",
        "test_planning_and_a_dry_run_change_nothing",
    ),
    m(
        "memory-window-kept",
        "memory",
        "sync migrates a changed dedup window in place",
        f"{MEMORY}/server.py",
        "    queue.dedup_window, queue.visibility_timeout = dedup_window, visibility_timeout\n",
        "",
        "test_a_new_dedup_window_is_migrated",
    ),
    m(
        "memory-close-twice",
        "memory",
        "close is idempotent, also without connect",
        f"{MEMORY}/broker.py",
        "        if not self._open:\n            return\n        self._open = False\n",
        "        if not self._open:\n            raise BrokerError('not connected')\n"
        "        self._open = False\n",
        "test_connect_and_close_are_idempotent",
    ),
    m(
        "memory-no-guard",
        "memory",
        "I/O before connect raises BrokerError",
        f"{MEMORY}/broker.py",
        "    def _q(self) -> server.Queue:\n        if not self._open:\n",
        "    def _q(self) -> server.Queue:\n        if False:\n",
        "test_io_without_a_connection_raises_broker_error",
    ),
    # -- redis:// --------------------------------------------------------------------------
    Mutant(
        "redis-per-process-dedup",
        "redis",
        "replicas in separate processes share the dedup",
        f"{REDIS}/broker.py",
        (
            (
                "        dedup = message.deduplication_id\n        deadline = ",
                "        dedup = message.deduplication_id\n"
                "        if dedup is not None and _SEEN.get(dedup, ('', 0.0))[1] > time.time():\n"
                "            return PublishResult(_SEEN[dedup][0], duplicate=True)\n"
                "        if dedup is not None:\n"
                "            _SEEN[dedup] = (message.id, time.time() + s.dedup_window)\n"
                "        deadline = ",
            ),
            (
                'has_dedup = int(s.dedup_window * 1000), "1" if dedup else "0"',
                'has_dedup = int(s.dedup_window * 1000), "0"',
            ),
            (
                "_PROMOTE_BATCH = 500\n",
                "_PROMOTE_BATCH = 500\n_SEEN: dict[str, tuple[str, float]] = {}\n",
            ),
        ),
        ("test_processes_publishing_the_same_ids", "test_worker_processes_run_each_slot"),
    ),
    m(
        "redis-short-window",
        "redis",
        "an id is a duplicate for the whole window",
        f"{REDIS}/broker.py",
        "window_ms, has_dedup = int(s.dedup_window * 1000),",
        "window_ms, has_dedup = int(s.dedup_window * 250),",
        "test_an_id_is_a_duplicate_for_the_whole_window",
    ),
    m(
        "redis-stats-ready-is-length",
        "redis",
        "queue_stats() does not count reserved entries as ready",
        f"{REDIS}/scripts.py",
        "return {math.max(0, entries - reserved) + due,",
        "return {entries + due,",
        "test_queue_stats_count",
    ),
    m(
        "redis-stale-settle",
        "redis",
        "a late settle leaves the reclaimed job alone",
        f"{REDIS}/scripts.py",
        "if held[1][2] ~= ARGV[3] or tostring(held[1][4]) ~= ARGV[4] then return -1 end",
        "",
        "test_settling_an_expired_reservation",
        "test_dead_lettering_an_expired",
    ),
    m(
        "redis-retry-twice",
        "redis",
        "a repeated retry leaves one copy",
        f"{REDIS}/scripts.py",
        "local held = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)\n"
        "if #held == 0 then return 0 end\n",
        "local held = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)\n"
        "if #held == 0 then held = {{0, ARGV[3], 0, tonumber(ARGV[4])}} end\n",
        "test_settling_again_changes_nothing",
        "test_dead_lettering_again",
    ),
    m(
        "redis-early-reclaim",
        "redis",
        "no redelivery before the visibility timeout",
        f"{REDIS}/broker.py",
        "idle = int(s.visibility_timeout * 1000)",
        "idle = int(s.visibility_timeout * 400)",
        "test_an_unsettled_delivery_comes_back_after_the_visibility_timeout_not_before",
    ),
    m(
        "redis-extend-noop",
        "redis",
        "extend keeps a delivery reserved",
        f"{REDIS}/scripts.py",
        "redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2], 'JUSTID')\n",
        "",
        "test_extend_keeps_a_long_job_reserved",
        "test_a_job_running_past",
    ),
    m(
        "redis-release-counted",
        "redis",
        "a release is not counted as an attempt",
        f"{REDIS}/broker.py",
        '"RELEASE", delivery, [], delivery.attempt - 1',
        '"RELEASE", delivery, [], delivery.attempt',
        "test_a_release_is_not_counted_as_an_attempt",
    ),
    m(
        "redis-close-keeps",
        "redis",
        "close hands reserved deliveries back",
        f"{REDIS}/broker.py",
        "        for delivery in list(self._held.values()):",
        "        for delivery in []:",
        "test_close_hands_reserved_deliveries_back_at_once",
    ),
    m(
        "redis-batch-limit",
        "redis",
        "receive never returns more than max_messages",
        f"{REDIS}/broker.py",
        "count=max_messages - len(out),",
        "count=max_messages + 5,",
        "test_receive_never_returns_more_than_asked",
    ),
    m(
        "redis-dead-newest-first",
        "redis",
        "dead letters come oldest first",
        f"{REDIS}/deadletters.py",
        "    out.reverse()\n    return out\n",
        "    return out\n",
        "test_dead_letters_are_the_latest_oldest_first",
    ),
    m(
        "redis-dead-limit",
        "redis",
        "dead_letters(0) returns none",
        f"{REDIS}/deadletters.py",
        "    if limit < 1:\n        return []\n",
        "",
        "test_dead_letters_are_the_latest_oldest_first",
    ),
    m(
        "redis-driver-error",
        "redis",
        "a driver error surfaces as BrokerError",
        f"{REDIS}/broker.py",
        "        except (RedisError, OSError) as exc:\n"
        '            raise BrokerError(f"redis {name.lower()} failed: {exc}") from None\n',
        "",
        "test_a_lost_server_is_a_broker_error",
    ),
    m(
        "redis-password-repr",
        "redis",
        "no repr shows a password",
        f"{REDIS}/settings.py",
        "client_url: str = field(repr=False)",
        "client_url: str = field(repr=True)",
        "test_credentials_show_in_no_log",
    ),
    # -- sqlite:// (the reference third-party adapter) -------------------------------------
    Mutant(
        "sqlite-per-process-dedup",
        "sqlite",
        "replicas in separate processes share the dedup",
        f"{SQLITE}/broker.py",
        (
            (
                "            if dedup is not None:\n                db.execute(\n",
                "            if dedup is not None and _SEEN.get(dedup, ('', 0.0))[1] > now:\n"
                "                return PublishResult(_SEEN[dedup][0], duplicate=True)\n"
                "            if dedup is not None:\n"
                "                _SEEN[dedup] = (message.id, now + self.dedup_window)\n"
                "            if False:\n                db.execute(\n",
            ),
            (
                'T = TypeVar("T")\n',
                'T = TypeVar("T")\n_SEEN: dict[str, tuple[str, float]] = {}\n',
            ),
        ),
        ("test_processes_publishing_the_same_ids", "test_worker_processes_run_each_slot"),
    ),
    m(
        "sqlite-no-unique",
        "sqlite",
        "a duplicate stores nothing",
        f"{SQLITE}/schema.py",
        '"expires REAL NOT NULL, UNIQUE (queue, dedup_id)"',
        '"expires REAL NOT NULL"',
        "test_a_duplicate_returns",
        "test_concurrent_publish",
    ),
    m(
        "sqlite-stale-settle",
        "sqlite",
        "a late settle leaves the redelivery alone",
        f"{SQLITE}/broker.py",
        'await self._settle(delivery, "DELETE FROM fm_jobs WHERE id = ? AND token = ?")',
        'await self._settle(delivery, "DELETE FROM fm_jobs WHERE id = ? AND ? IS NOT NULL")',
        "test_settling_an_expired_reservation",
    ),
    m(
        "sqlite-no-reservation",
        "sqlite",
        "a reserved delivery goes to no other consumer",
        f"{SQLITE}/broker.py",
        '"AND (until IS NULL OR until <= ?) ORDER BY due, id LIMIT ?) "',
        '"AND (until IS NULL OR until <= ? + 3600) ORDER BY due, id LIMIT ?) "',
        "test_a_reserved_delivery_goes_to_no_other_consumer",
    ),
    m(
        "sqlite-dead-attempts",
        "sqlite",
        "a dead letter keeps the attempt",
        f"{SQLITE}/broker.py",
        "(q, delivery.body, reason, delivery.attempt, time.time())",
        "(q, delivery.body, reason, 0, time.time())",
        "test_a_dead_letter_keeps",
        "test_a_dead_letter_from_the_worker",
    ),
    m(
        "sqlite-dead-newest-first",
        "sqlite",
        "dead letters come oldest first",
        f"{SQLITE}/broker.py",
        "for b, r, n, t, i in reversed(rows)]",
        "for b, r, n, t, i in rows]",
        "test_dead_letters_are_the_latest_oldest_first",
    ),
    m(
        "sqlite-release-counted",
        "sqlite",
        "a release is not counted as an attempt",
        f"{SQLITE}/broker.py",
        '"UPDATE fm_jobs SET token = NULL, until = NULL, deliveries = deliveries - 1 "',
        '"UPDATE fm_jobs SET token = NULL, until = NULL, deliveries = deliveries "',
        "test_a_release_is_not_counted_as_an_attempt",
    ),
    m(
        "sqlite-close-keeps",
        "sqlite",
        "close hands reserved deliveries back",
        f"{SQLITE}/broker.py",
        "        for delivery in list(self._held.values()):",
        "        for delivery in []:",
        "test_close_hands_reserved_deliveries_back_at_once",
    ),
    m(
        "sqlite-waits-out",
        "sqlite",
        "receive returns as soon as a delivery is there",
        f"{SQLITE}/broker.py",
        "            if taken or time.monotonic() >= deadline:",
        "            if time.monotonic() >= deadline:",
        "test_receive_returns_once",
    ),
    m(
        "sqlite-retry-now",
        "sqlite",
        "a retry waits its delay",
        f"{SQLITE}/broker.py",
        "time.time() + max(0.0, delay),",
        "time.time(),",
        "test_retry_delivers_again_after_the_delay",
    ),
    m(
        "sqlite-stale-window",
        "sqlite",
        "dedup_window is the window the broker keeps",
        f"{SQLITE}/broker.py",
        "        await self._run(lambda db: schema.apply(db, self.settings))\n"
        "        self._stored = await self._run("
        "lambda db: schema.stored(db, self.settings.queue))\n",
        "        await self._run(lambda db: schema.apply(db, self.settings))\n",
        "test_a_new_dedup_window_is_migrated",
    ),
    m(
        "sqlite-extend-noop",
        "sqlite",
        "extend keeps a delivery reserved",
        f"{SQLITE}/broker.py",
        '"UPDATE fm_jobs SET until = ? WHERE id = ? AND token = ?"',
        '"UPDATE fm_jobs SET until = until + 0 * ? WHERE id = ? AND token = ?"',
        "test_extend_keeps_a_long_job_reserved",
        "test_a_job_running_past",
    ),
)
