"""The template's event source mappings, run locally: each function's environments and its pollers.

For every function the stack creates, ``EventSourceMappings`` reads its ``SQS`` and ``Kinesis`` events
from the template (batch size, batching window, maximum concurrency, response types, bisection,
retries, record age, on-failure destination), starts the function's execution environments
(``tally_local.function``) with the environment the template gives it (table names, dead-letter
queue, windows, hot keys: ``!Ref`` resolved to the local names) plus the local endpoints, and starts
the pollers (``tally_local.poller``): ``MaximumConcurrency`` pollers per queue (Lambda's default of 5
without it), one per shard per stream. ``wait_until_drained`` returns once every queue is empty and
every shard read to its tip, with every poller idle.

It owns which pollers and execution environments a stack gets, as the template configures them; how a
poller behaves (Lambda's delivery rules) is ``tally_local.poller``'s, and it must not create resources
(``tally_local.stack`` does) or import the module that creates them.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from typing import TYPE_CHECKING, Final, Self

from tally.errors import TallyError
from tally_local.function import LocalFunction
from tally_local.poller import KinesisShardPoller, SourceStats, SqsPoller, SqsPollers
from tally_local.service import BackgroundService
from tally_local.template import function_definition, function_event_sources, resource_created, stream_event_sources

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

    from tally_local.poller import _Poller
    from tally_local.resources import LocalResources
    from tally_local.template import KinesisEventSource, SqsEventSource

logger = logging.getLogger(__name__)

DEFAULT_SQS_POLLERS: Final = 5
"""Lambda starts five pollers for an SQS event source without ``MaximumConcurrency``."""
FUNCTION_ENVIRONMENT: Final = {
    # No X-Ray daemon locally; metrics stay on: their EMF lines go to the function's log and are summed.
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_METRICS_DISABLED": "false",
}


class PollerFailedError(TallyError):
    """A poller stopped on an unexpected error (its cause is attached)."""


class EventSourceMappings(BackgroundService):
    """Functions and pollers of a local stack; ``stats[event name]`` says what each mapping did."""

    def __init__(
        self,
        resources: LocalResources,
        *,
        log_dir: Path,
        environment: Mapping[str, str] | None = None,
        handlers: Mapping[str, str] | None = None,
    ) -> None:
        """``environment`` is added to every function's; ``handlers`` (function logical id -> ``module.attr``)
        runs another handler than the template's, e.g. a test's wrapper around the real one."""
        self.resources = resources
        self.log_dir = log_dir
        self._extra_environment = dict(environment or {})
        self._handlers = dict(handlers or {})
        self._stop = threading.Event()
        self.functions: dict[str, LocalFunction] = {}
        self.pollers: list[_Poller] = []
        self.stats: dict[str, SourceStats] = {}
        self._queues: list[str] = []

    def start(self) -> Self:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the pollers (a batch in flight finishes), then the functions' environments."""
        self._stop.set()
        for poller in self.pollers:
            poller.release()
        for poller in self.pollers:
            poller.join()
        for function in self.functions.values():
            function.stop()

    def check(self) -> None:
        """Raise ``PollerFailedError`` if a poller died."""
        for poller in self.pollers:
            if poller.failure is not None:
                raise PollerFailedError(f"{poller.name} stopped: {poller.failure!r}") from poller.failure

    def drained(self, since: float) -> bool:
        """Everything published before ``since`` (``time.monotonic()``) is processed: every poller found
        nothing in a poll started after it (every shard read to its tip), and every queue is empty, with
        nothing in flight or delayed, and no poller delivered records while the queues were read."""
        self.check()
        deliveries = [poller.deliveries for poller in self.pollers]
        if not all(poller.caught_up_since(since) for poller in self.pollers):
            return False
        sqs = self.resources.client("sqs")
        for url in self._queues:
            # In flight first, in a request of its own, then visible and delayed: moto computes each count at its
            # own instant, the visible one first, so a message whose visibility ended between the two counted in
            # neither, and a queue about to move it to its dead-letter queue read as drained. Visibility only ends
            # with time; a receive that starts it again is a poller's, checked below.
            for names in (
                ["ApproximateNumberOfMessagesNotVisible"],
                ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"],
            ):
                attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
                if any(int(attributes.get(name, "0")) for name in names):
                    return False
        # A message whose visibility ended before the in-flight count, received before the visible one and failed
        # since: both counts missed it, the poller is idle again, and its visibility timeout will bring it back.
        return all(poller.caught_up_since(since) for poller in self.pollers) and deliveries == [
            poller.deliveries for poller in self.pollers
        ]

    def wait_until_drained(self, timeout_s: float) -> None:
        """Block until everything published so far is processed (``TimeoutError`` after ``timeout_s``)."""
        since = time.monotonic()
        deadline = since + timeout_s
        while not self.drained(since):
            if time.monotonic() >= deadline:
                held = sum(stats.metrics.get("RecordsHeldByLease", 0.0) for stats in self.stats.values())
                why = (
                    f"; {held:.0f} records were held by an open journal batch's lease: they come back one visibility "
                    "timeout later, as on AWS (a copy sent while its original's batch is open: drain first)"
                    if held
                    else ""
                )
                raise TimeoutError(f"event sources not drained within {timeout_s:.0f} s{why}: {self.stats}")
            time.sleep(0.1)

    # ----------------------------------------------------------------------------------------------

    def _start(self) -> None:
        template = self.resources.template
        for logical_id, resource in template["Resources"].items():
            if resource.get("Type") != "AWS::Serverless::Function" or not resource_created(template, logical_id):
                continue
            # Each poller runs one batch at a time: one execution environment per poller, as Lambda scales.
            plans = [*self._sqs_pollers(logical_id), *self._shard_pollers(logical_id)]
            if not plans:
                continue
            function = self._function(logical_id, concurrency=len(plans)).start()
            self.functions[logical_id] = function
            self.pollers.extend(plan(function) for plan in plans)
        for poller in self.pollers:
            poller.start()
        logger.info("started %d pollers for %s", len(self.pollers), sorted(self.functions))

    def _sqs_pollers(self, logical_id: str) -> list[Callable[[LocalFunction], _Poller]]:
        plans: list[Callable[[LocalFunction], _Poller]] = []
        for event_name, source in function_event_sources(self.resources.template, logical_id).items():
            stats = self.stats.setdefault(event_name, SourceStats())
            url = self.resources.physical_ids[source.queue_logical_id]
            self._queues.append(url)
            group = SqsPollers()
            for index in range(source.maximum_concurrency or DEFAULT_SQS_POLLERS):
                name = f"{event_name}-poller-{index}"
                plans.append(
                    functools.partial(self._sqs_poller, name, source, url, stats, group=group, first=index == 0)
                )
        return plans

    def _sqs_poller(
        self,
        name: str,
        source: SqsEventSource,
        url: str,
        stats: SourceStats,
        function: LocalFunction,
        *,
        group: SqsPollers,
        first: bool,
    ) -> _Poller:
        return SqsPoller(
            name,
            sqs=self.resources.client("sqs"),
            queue_url=url,
            queue_arn=self.resources.arns[source.queue_logical_id],
            source=source,
            function=function,
            stats=stats,
            stop=self._stop,
            region=self.resources.region,
            group=group,
            first=first,
        )

    def _shard_pollers(self, logical_id: str) -> list[Callable[[LocalFunction], _Poller]]:
        plans: list[Callable[[LocalFunction], _Poller]] = []
        for event_name, source in stream_event_sources(self.resources.template, logical_id).items():
            stats = self.stats.setdefault(event_name, SourceStats())
            stream_name = self.resources.physical_ids[source.stream_logical_id]
            for shard in self.resources.client("kinesis").list_shards(StreamName=stream_name)["Shards"]:
                plans.append(functools.partial(self._shard_poller, event_name, source, shard["ShardId"], stats))
        return plans

    def _shard_poller(
        self, event_name: str, source: KinesisEventSource, shard_id: str, stats: SourceStats, function: LocalFunction
    ) -> _Poller:
        destination = source.on_failure_destination
        return KinesisShardPoller(
            f"{event_name}-{shard_id}",
            kinesis=self.resources.client("kinesis"),
            sqs=self.resources.client("sqs"),
            stream_name=self.resources.physical_ids[source.stream_logical_id],
            stream_arn=self.resources.arns[source.stream_logical_id],
            shard_id=shard_id,
            source=source,
            function=function,
            on_failure_queue_url=self.resources.physical_ids[destination] if destination else None,
            stats=stats,
            stop=self._stop,
            region=self.resources.region,
        )

    def _function(self, logical_id: str, concurrency: int) -> LocalFunction:
        definition = function_definition(self.resources.template, logical_id, self.resources.physical_ids)
        if logical_id in self._handlers:
            definition = dataclasses.replace(definition, handler=self._handlers[logical_id])
        environment = {**self.resources.client_environment(), **FUNCTION_ENVIRONMENT, **self._extra_environment}
        return LocalFunction(definition, environment, concurrency=concurrency, log_dir=self.log_dir)
