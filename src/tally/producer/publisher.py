"""What the SQS and Kinesis publishers share: messages built once, ids assigned before any attempt, then delivered.

A publisher packs events into messages (``tally.producer.packing``) and hands them to the delivery loop
(``tally.producer.delivery``), which groups them into the service's batch calls and retries only what
failed. A service adapter says how to group messages and how to send one batch (``BatchChannel``); the
rest is here, once.
"""

from __future__ import annotations

import hashlib
import random
import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from tally.core.views import CounterViews, parse_counter_views
from tally.producer.delivery import Delivery, RetryPolicy
from tally.producer.packing import DEFAULT_MAX_KEYS_PER_MESSAGE, NumberedIds, PackLimits, build_messages

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

    from tally.producer.delivery import EntryFailure
    from tally.producer.event import Event
    from tally.producer.result import PublishResult
    from tally.producer.wire import OutgoingMessage


def routing_key(message: OutgoingMessage) -> str:
    """The counter key of a single-event message, the message id of a packed one."""
    key = message.single_key if not message.packed else None
    return key if key is not None else message.message_id


def accepted_or_digest(value: str, accepted: Callable[[str], object]) -> str:
    """``value`` if the service accepts it as it is, else its SHA-256 (64 hex digits), so that the same value
    always becomes the same token."""
    if accepted(value):
        return value
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


class Publisher(ABC):
    """Prepare events into messages and send them through the subclass's batch calls, under a retry policy."""

    def __init__(
        self,
        *,
        pack: bool,
        max_message_bytes: int,
        max_keys_per_message: int = DEFAULT_MAX_KEYS_PER_MESSAGE,
        minute_windows: bool = False,
        views: CounterViews | str = "",
        policy: RetryPolicy | None = None,
        new_id: Callable[[], str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.views = parse_counter_views(views) if isinstance(views, str) else views
        """The consumer's ``CounterViews`` (text or parsed): events whose ``dims`` its views would refuse are refused
        at ``prepare``, and packing counts each view's item as the consumer writes it."""
        self.limits = (
            PackLimits(
                max_bytes=max_message_bytes,
                max_keys=max_keys_per_message,
                minute_windows=minute_windows,
                views=self.views,
            )
            if pack
            else None
        )
        self._new_id = new_id if new_id is not None else NumberedIds()
        """Message ids: numbered by default (one session per publisher), which the consumer's markers share
        items for (docs/reference/event-format.md, "Numbered ids"); ``new_id=new_message_id`` gives random
        UUIDs instead."""
        self._delivery = Delivery(self, policy or RetryPolicy(), sleep, rng or random.Random())

    def prepare(self, events: Iterable[Event]) -> list[OutgoingMessage]:
        """Build the messages for ``events``, assigning each its id now, once, before any attempt."""
        return build_messages(events, self.limits, self._new_id, self.views)

    def publish(self, events: Iterable[Event]) -> PublishResult:
        """Prepare and send ``events``; see ``PublishResult`` for what was sent, retried and failed."""
        return self.send(self.prepare(events))

    def send(self, messages: Sequence[OutgoingMessage]) -> PublishResult:
        """Send prepared messages (for example ``result.failed_messages``), unchanged: same ids, same bodies."""
        return self._delivery.run(messages)

    # --- BatchChannel: what the service adapter provides ------------------------------------------

    @abstractmethod
    def batches(self, messages: Sequence[OutgoingMessage]) -> Iterator[Sequence[OutgoingMessage]]:
        """Group ``messages`` into the service's batch calls."""

    @abstractmethod
    def send_batch(self, batch: Sequence[OutgoingMessage]) -> list[EntryFailure]:
        """Send one batch; return the entries that failed (a whole-call failure fails them all)."""
