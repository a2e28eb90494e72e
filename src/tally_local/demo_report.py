"""The demo's tables: built from figures the demo measured, never from constants (rich ``Table`` s)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from rich.table import Table

from tally.core.numbers import EXACT

if TYPE_CHECKING:
    import random
    from collections.abc import Mapping, Sequence

    from tally_local.kit.writes import DynamoDBWrites

OK = "[green]ok[/]"
WRONG = "[bold red]WRONG[/]"

Totals = dict[str, dict[str, Decimal]]


@dataclass(frozen=True, slots=True)
class KeyCheck:
    """Every key's expected totals against what ``read_counters`` and the table scan returned."""

    expected: Totals
    counted: Totals
    """Per key, through ``DynamoDBCounterStore.read_counters`` (what ``tally get`` reads)."""
    scanned: Totals
    """Per key, through the table scan behind ``tally top`` (shards summed)."""

    @property
    def wrong_keys(self) -> list[str]:
        keys = set(self.expected) | set(self.counted) | set(self.scanned)
        return sorted(
            key
            for key in keys
            if _clean(self.expected.get(key, {})) != _clean(self.counted.get(key, {}))
            or _clean(self.expected.get(key, {})) != _clean(self.scanned.get(key, {}))
        )

    @property
    def ok(self) -> bool:
        return not self.wrong_keys


def _clean(counters: Mapping[str, Decimal]) -> dict[str, Decimal]:
    """Counters without zeros (an absent counter and a zero one read the same)."""
    return {name: value for name, value in counters.items() if value != 0}


def grand_total(totals: Mapping[str, Mapping[str, Decimal]], counter: str) -> Decimal:
    total = Decimal(0)
    for counters in totals.values():
        total = EXACT.add(total, counters.get(counter, Decimal(0)))  # not sum(): it rounds to 28 digits
    return total


def sample_keys(expected: Totals, hot: Sequence[str], rng: random.Random, size: int = 10) -> list[str]:
    """The largest keys, the hot ones, and a few picked at random."""
    by_count = sorted(expected, key=lambda key: (-expected[key].get("count", Decimal(0)), key))
    chosen = list(dict.fromkeys([*by_count[: size // 2], *[key for key in hot if key in expected]]))
    rest = [key for key in expected if key not in chosen]
    chosen += rng.sample(rest, min(len(rest), size - len(chosen)))
    return chosen


def key_table(check: KeyCheck, keys: Sequence[str], hot: Sequence[str]) -> Table:
    table = Table(title=f"per key: expected vs counted ({len(keys)} of {len(check.expected)} keys shown, all checked)")
    for column in ("key", "expected count", "counted", "expected amount", "counted", ""):
        table.add_column(column, justify="left" if column in ("key", "") else "right")
    for key in keys:
        want, got = check.expected.get(key, {}), check.counted.get(key, {})
        label = f"{key} [dim](hot: sharded)[/]" if key in hot else key
        match = _clean(want) == _clean(got) == _clean(check.scanned.get(key, {}))
        table.add_row(
            label,
            f"{want.get('count', 0):,}",
            f"{got.get('count', 0):,}",
            f"{want.get('amount', 0):,}",
            f"{got.get('amount', 0):,}",
            OK if match else WRONG,
        )
    return table


def totals_table(check: KeyCheck) -> Table:
    table = Table(title="grand totals over every key")
    for column in ("counter", "expected", "get (per key)", "scan (tally top)", ""):
        table.add_column(column, justify="left" if column in ("counter", "") else "right")
    for counter in ("count", "amount"):
        want = grand_total(check.expected, counter)
        got = grand_total(check.counted, counter)
        scanned = grand_total(check.scanned, counter)
        table.add_row(counter, f"{want:,}", f"{got:,}", f"{scanned:,}", OK if want == got == scanned else WRONG)
    keys_ok = len(check.expected) - len([key for key in check.wrong_keys if key in check.expected])
    table.add_row("keys exact", f"{len(check.expected):,}", f"{keys_ok:,}", "", OK if check.ok else WRONG)
    return table


def dead_letter_table(expected_codes: Sequence[str], found_codes: Sequence[str], reasons: Mapping[str, str]) -> Table:
    table = Table(title="poison: published vs found in the dead-letter queue, by tally.error_code")
    for column in ("error code", "published", "in the DLQ", "a reason given", ""):
        table.add_column(column, justify="right" if column in ("published", "in the DLQ") else "left")
    want, got = Counter(expected_codes), Counter(found_codes)
    for code in sorted(set(want) | set(got)):
        table.add_row(
            code, str(want[code]), str(got[code]), reasons.get(code, "")[:60], OK if want[code] == got[code] else WRONG
        )
    return table


def figures_table(rows: Sequence[tuple[str, str]], title: str) -> Table:
    table = Table(title=title, show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    for name, value in rows:
        table.add_row(name, value)
    return table


def writes_rows(writes: DynamoDBWrites, events: int, messages: int) -> list[tuple[str, str]]:
    """DynamoDB write figures, per event and per message (measured by the botocore hook in each function)."""
    per_event = writes.items_written / events if events else 0.0
    per_message = writes.items_written / messages if messages else 0.0
    return [
        ("DynamoDB write requests", f"{writes.requests:,}"),
        ("  committed transactions", f"{writes.transactions:,}"),
        ("  cancelled transactions (a marker existed, a conflict)", f"{writes.cancelled_transactions:,}"),
        ("items written: counter ADDs", f"{writes.counter_adds:,}"),
        ("items written: markers and journal items", f"{writes.puts:,}"),
        ("DynamoDB items written per event", f"{per_event:.3f}"),
        ("DynamoDB items written per message", f"{per_message:.2f}"),
    ]
