"""What a deployment declares about its counters, as one value: windows, views, hot keys, start values and default
deltas, bounds, thresholds.

Each declaration has its own parameter and its own grammar (``tally.core.windows``, ``views``, ``sharding``,
``defaults``, ``bounds``, ``thresholds``); ``parse_declarations`` reads the six together, in the order in which
they depend on each other (the others name a view's items by the views declared; a bound checks the start values
and the hot keys, a threshold the hot keys and the windows), and
``Declarations`` is what the edge (``tally.config``) builds once and hands to the decoder, the aggregator and the
write planner. The store adapters never see it: they encode what the planner decided.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tally.core.bounds import NO_BOUNDS, CounterBounds, parse_counter_bounds
from tally.core.defaults import NO_DEFAULTS, CounterDefaults, parse_counter_defaults
from tally.core.items import ALL_TIME
from tally.core.sharding import HotKeys, parse_hot_keys
from tally.core.thresholds import NO_THRESHOLDS, CounterThresholds, parse_counter_thresholds
from tally.core.views import NO_VIEWS, CounterViews, parse_counter_views
from tally.core.windows import WindowSpec, parse_window_spec

if TYPE_CHECKING:
    from collections.abc import Callable

    from tally.core.items import ItemKey


@dataclass(frozen=True, slots=True)
class Declarations:
    """Every counter declaration of a deployment (the defaults: none, all-time values only)."""

    windows: WindowSpec = field(default_factory=WindowSpec)
    """Time windows counted besides the all-time value (``TALLY_WINDOWS``, ``TALLY_WINDOW_RETENTION``)."""
    hot_keys: HotKeys = field(default_factory=HotKeys)
    """Keys whose writes are spread over shard items (``TALLY_HOT_KEYS``)."""
    defaults: CounterDefaults = NO_DEFAULTS
    """Start values and default deltas (``TALLY_COUNTER_DEFAULTS``)."""
    bounds: CounterBounds = NO_BOUNDS
    """Floors and ceilings (``TALLY_COUNTER_BOUNDS``)."""
    thresholds: CounterThresholds = NO_THRESHOLDS
    """Levels whose crossings are announced (``TALLY_COUNTER_THRESHOLDS``)."""
    views: CounterViews = NO_VIEWS
    """The views each event also counts in, by its dimensions (``TALLY_COUNTER_VIEWS``, ``tally.core.views``)."""

    def __post_init__(self) -> None:
        counted = {unit.name for unit in self.windows.units}
        missing = {rule.window for rule in self.thresholds.rules} - counted - {ALL_TIME}
        if missing:
            raise ValueError(f"per-window thresholds need their windows counted: {', '.join(sorted(missing))}")

    def conditioned(self) -> Callable[[ItemKey], bool] | None:
        """The items whose writes carry a condition only a direct transaction can (a bound, a crossing): the
        planner pins the messages that touch one to direct transactions (``tally.core.plan.plan_batch``). None:
        no item."""
        bounds, thresholds = self.bounds, self.thresholds
        if not bounds.rules and not thresholds.rules:
            return None

        def pinned(item: ItemKey) -> bool:
            return bounds.is_bounded(item) or thresholds.is_thresholded(item)

        return pinned


NO_DECLARATIONS = Declarations()


def parse_declarations(
    *,
    windows: str = "",
    window_retention: str = "",
    hot_keys: str = "",
    defaults: str = "",
    bounds: str = "",
    thresholds: str = "",
    views: str = "",
) -> Declarations:
    """The six declarations from their parameters' text; ``ValueError`` naming the first one malformed."""
    spec = parse_window_spec(windows, window_retention)
    declared = parse_counter_views(views)
    hot = parse_hot_keys(hot_keys, declared)
    starts = parse_counter_defaults(defaults, hot, declared)
    return Declarations(
        windows=spec,
        hot_keys=hot,
        defaults=starts,
        bounds=parse_counter_bounds(bounds, hot, starts, declared),
        thresholds=parse_counter_thresholds(thresholds, hot, windows=spec, views=declared),
        views=declared,
    )
