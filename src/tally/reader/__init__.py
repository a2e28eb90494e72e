"""Read tally's counters from an application: one key, many keys, a series of time windows, the top N.

Importable with boto3 and msgspec only (no Powertools, no tenacity, no click)::

    import boto3
    from tally.reader import CounterReader

    reader = CounterReader("my-tally-CountersTable-...", client=boto3.client("dynamodb"), hot_keys="page:/home=8")
    reader.get("page:/home").value("count")                    # Decimal('1234'): 0 when never counted
    reader.get_many(["page:/home", "page:/pricing"])           # {key: Counters}, one BatchGetItem per 100 items
    reader.series("page:/home", "hour", from_ms, to_ms)        # Series: every hour, gaps as empty windows
    reader.top(10, counter="count")                            # [Ranked(key, counter, value)]: a Scan
    reader.group("api", "customer", "day").top(10, "calls")    # a view's values in today's window: Queries
    reader.values("api", "customer", "month")                  # the customers counted this month

    NotificationReader.from_environment().list(key="stock:1")  # threshold crossings recorded (a Scan)

Values are exact ``Decimal`` (38 significant digits, as DynamoDB keeps them), hot-key shards summed.
``CounterReader.from_environment()`` reads ``TALLY_COUNTERS_TABLE``, ``TALLY_HOT_KEYS``, ``TALLY_WINDOWS`` and
``TALLY_COUNTER_VIEWS`` (``tally stack NAME --env`` prints them). The IAM it needs is the stack's
``ReaderPolicyArn`` output.
"""

from tally.errors import InvalidReadError
from tally.reader.dynamodb import CounterReader, largest
from tally.reader.notifications import Notification, NotificationReader
from tally.reader.requests import MAX_SERIES_WINDOWS, check_key, parse_time_ms, window_unit
from tally.reader.results import Counters, KeyState, OperatorRecord, Ranked, Series, Window, iso_utc
from tally.reader.views import ViewGroup, ViewRow

__all__ = [
    "MAX_SERIES_WINDOWS",
    "CounterReader",
    "Counters",
    "InvalidReadError",
    "KeyState",
    "Notification",
    "NotificationReader",
    "OperatorRecord",
    "Ranked",
    "Series",
    "ViewGroup",
    "ViewRow",
    "Window",
    "check_key",
    "iso_utc",
    "largest",
    "parse_time_ms",
    "window_unit",
]
