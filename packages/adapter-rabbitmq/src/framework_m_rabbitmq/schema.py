"""RabbitMQ schema sync: the dedup and store exchanges, the jobs, dead and retry queues, the
delivery-limit policy.

Exchange and queue arguments cannot change in place: a differing one is
refused with RabbitMQ's own words. The delivery limit, the one setting
RabbitMQ lets change at run time, lives in a policy set through the
management HTTP API, so a new limit is an update in place.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import aiormq

from framework_m_core.ports import BrokerError, SchemaChange, SchemaPlan

from .connection import Link
from .settings import EXCHANGE_TYPE, STORE_EXCHANGE_TYPE

log = logging.getLogger("framework_m.rabbitmq")

PLUGIN_HINT = (
    "enable the rabbitmq-message-deduplication plugin, or framework-m's own "
    "(python -m framework_m_rabbitmq.plugin build)"
)
STORE_HINT = (
    "build framework-m's plugin (python -m framework_m_rabbitmq.plugin build), or add "
    "store=off to the URL to run without the control plane (statuses, limits, pauses)"
)

Declare = Callable[..., Awaitable[Any]]  # (channel, passive=...)


async def _declare_retry_queue(
    channel: Any, passive: bool, *, name: str, arguments: dict[str, Any]
) -> Any:
    return await channel.declare_queue(name, durable=True, arguments=arguments, passive=passive)


class RabbitSchema:
    """Plans and applies the topology of one queue over a :class:`Link`."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.s = link.settings

    def _declarations(self) -> list[tuple[str, Declare, str]]:
        s = self.s
        store: list[tuple[str, Declare, str]] = [
            (
                f"exchange {s.store_exchange}",
                lambda ch, passive: ch.declare_exchange(
                    s.store_exchange,
                    STORE_EXCHANGE_TYPE,
                    durable=True,
                    arguments=s.store_args,
                    passive=passive,
                ),
                f"type {STORE_EXCHANGE_TYPE} (the store: leases, statuses, pauses, "
                f"runtime schedules), x-store-persistence {s.cache_persistence}",
            ),
        ]
        return [
            (
                f"exchange {s.exchange}",
                lambda ch, passive: ch.declare_exchange(
                    s.exchange,
                    EXCHANGE_TYPE,
                    durable=True,
                    arguments=s.exchange_args,
                    passive=passive,
                ),
                f"type {EXCHANGE_TYPE}, x-cache-ttl {int(s.dedup_window * 1000)} ms, "
                f"x-cache-persistence {s.cache_persistence}",
            ),
            (
                f"queue {s.jobs}",
                lambda ch, passive: ch.declare_queue(
                    s.jobs, durable=True, arguments=s.jobs_args, passive=passive
                ),
                f"durable quorum queue, bound to the exchange, dead-lettering to {s.dead}",
            ),
            (
                f"queue {s.dead}",
                lambda ch, passive: ch.declare_queue(s.dead, durable=True, passive=passive),
                "durable dead-letter queue",
            ),
            *(
                (
                    f"queue {name}",
                    functools.partial(_declare_retry_queue, name=name, arguments=s.retry_args(ms)),
                    f"retry queue: holds a retried job {ms} ms, then back to {s.jobs}",
                )
                for name, ms in s.retry_queues
            ),
            *(store if s.store else []),
        ]

    def _exchange_types(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """Each exchange's type, and the arguments a probe of that type needs."""
        return {
            f"exchange {self.s.exchange}": (EXCHANGE_TYPE, {"x-cache-size": 1}),
            f"exchange {self.s.store_exchange}": (STORE_EXCHANGE_TYPE, {}),
        }

    async def plan(self) -> SchemaPlan:
        self.link.channel()  # the connected guard
        changes: list[SchemaChange] = []
        unchecked: list[str] = []
        refusal: Exception | None = None
        declarations = self._declarations()
        missing = await self.link.probe_all(
            [functools.partial(declare, passive=True) for _, declare, _ in declarations]
        )
        present = [d for d, gone in zip(declarations, missing, strict=True) if gone is None]
        refusals = dict(
            zip(
                [target for target, _, _ in present],
                await self.link.probe_all(
                    [functools.partial(declare, passive=False) for _, declare, _ in present]
                ),
                strict=True,
            )
        )
        for target, _, detail in declarations:
            if target not in refusals:
                kind = self._exchange_types().get(target)
                if kind is not None and not await self.link.exchange_type_known(*kind):
                    hint = STORE_HINT if kind[0] == STORE_EXCHANGE_TYPE else PLUGIN_HINT
                    detail = f"the broker has no exchange type {kind[0]!r}: {hint}"
                    changes.append(SchemaChange("refuse", target, detail))
                else:
                    changes.append(SchemaChange("create", target, detail))
                continue
            refused = refusals[target]
            if isinstance(refused, aiormq.exceptions.ChannelAccessRefused):
                unchecked.append(target)
                refusal = refused
            elif refused is not None:
                detail = (
                    f"exists with other arguments ({refused}); delete it (after moving its "
                    "messages) and run `m sync-schema`"
                )
                changes.append(SchemaChange("refuse", target, detail))
        warnings = []
        if refusal is not None:
            warnings.append(
                f"cannot check the arguments of {', '.join(unchecked)}: "
                f"{self._no_permission(refusal)}"
            )
        policy, said = await self._plan_policy()
        return SchemaPlan(tuple(changes + policy), tuple(warnings + said))

    def _no_permission(self, refused: Exception) -> str:
        """A refusal for lack of the configure permission: nothing needs deleting."""
        return (
            f"the user lacks the configure permission ({refused}): grant it on names "
            f"starting with '{self.s.queue}.' (rabbitmqctl set_permissions -p <vhost> <user> "
            f"'^{re.escape(self.s.queue)}\\.' <write> <read>), or run `m sync-schema` as a user "
            "that has it; nothing needs deleting"
        )

    async def _plan_policy(self) -> tuple[list[SchemaChange], list[str]]:
        """The changes the delivery-limit policy needs, and what an operator must know of
        it (the plan's warnings: whoever shows the plan shows them, a worker logs them)."""
        s, api = self.s, self.s.management
        if api is None:
            return [], []
        target = f"policy {s.policy_name}"
        try:
            current = await api.get_policy(s.policy_name)
            if current is None:
                detail = f"delivery-limit {s.delivery_limit} on {s.jobs}"
                return [SchemaChange("create", target, detail, "policy")], []
            if diffs := s.policy.differences(current):
                return [SchemaChange("update", target, ", ".join(diffs), "policy")], []
            in_effect = await api.queue_policy(s.jobs)
        except BrokerError as exc:
            return [], [self._unmanaged(str(exc))]
        if in_effect not in (None, s.policy_name):
            return [], [
                f"policy {in_effect}, not {s.policy_name}, is in effect on {s.jobs} (RabbitMQ "
                f"applies the one with the highest priority): the delivery limit is whatever "
                f"{in_effect} says; raise policy_priority or fold delivery-limit into it"
            ]
        return [], []

    def _unmanaged(self, reason: str) -> str:
        s, p = self.s, self.s.policy
        return (
            f"amqp: {reason}; the delivery-limit backstop of {s.jobs} is not managed. Set it "
            f"yourself: rabbitmqctl set_policy -p {s.management.vhost if s.management else '/'} "
            f"--apply-to queues --priority {p.priority} {s.policy_name} '{p.pattern}' "
            f"'{json.dumps(p.definition)}' (or pass ?management=URL, or ?management=off to "
            "silence this)"
        )

    async def apply(self, plan: SchemaPlan) -> None:
        """Declare everything (idempotent), then set the policy when the plan changes it."""
        s, channel = self.s, self.link.channel()
        try:
            exchange = await channel.declare_exchange(
                s.exchange, EXCHANGE_TYPE, durable=True, arguments=s.exchange_args
            )
            await channel.declare_queue(s.dead, durable=True)
            if s.store:
                await channel.declare_exchange(
                    s.store_exchange, STORE_EXCHANGE_TYPE, durable=True, arguments=s.store_args
                )
            jobs = await channel.declare_queue(s.jobs, durable=True, arguments=s.jobs_args)
            await jobs.bind(exchange)
            for name, ms in s.retry_queues:
                await channel.declare_queue(name, durable=True, arguments=s.retry_args(ms))
        except aiormq.exceptions.AMQPError as exc:
            await self.link.reopen()
            if isinstance(exc, aiormq.exceptions.ChannelAccessRefused):
                detail = self._no_permission(exc)
                raise BrokerError(f"cannot declare the topology: {detail}") from None
            if "exchange type" in str(exc):
                raise BrokerError(
                    f"the broker has no exchange type {EXCHANGE_TYPE!r}: {PLUGIN_HINT}"
                ) from None
            raise BrokerError(f"cannot declare the topology of {s.jobs}: {exc}") from None
        if s.management is not None and any(c.step == "policy" for c in plan.changes):
            await s.management.put_policy(s.policy_name, s.policy)
            log.info("amqp: policy %s set: delivery-limit %d", s.policy_name, s.delivery_limit)
