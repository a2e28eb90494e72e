"""The read endpoint: ``tally.handlers.read.handler``, behind a Lambda function URL with IAM auth
(template.yaml, ``ReadEndpoint=FunctionUrl``), so that an application's page can show a count.

    GET /counters/{key}                                        -> {"key": ..., "counters": {"count": "2"}}
    GET /counters/{key}?window=hour&from=2026-11-22T00:00:00Z&to=...   -> {"key", "window", "windows": [...]}
    GET /counters/{key}?by=customer[&window=day&at=...]        -> {"key", "view", "window", "start", "rows": [...]}
    GET /counters/{key}?by=customer&window=day&top=10&counter=calls    -> the 10 largest rows, largest first

``{key}`` is percent-encoded (``encodeURIComponent``: ``page%3A%2Fhome``); a function URL hands the path
over still encoded (an API Gateway HTTP API would decode ``%2F`` first, and a key holding ``/`` could then not
be told from the path), and it is decoded once here. ``from``/``to`` are epoch milliseconds or ISO 8601 with
an offset; without them the series is the 24 windows up to now; at most ``MAX_HTTP_WINDOWS`` windows. ``by`` reads
a view (``tally.core.views``: ``customer``, ``customer+route``): each of its values in one window (the one holding
``at``, default now) or all-time without ``window``, each row ``{"dims": {"customer": "acme"}, "counters": {...}}``,
from ``Query``s of the view's items (never a scan); ``top`` keeps the largest rows of ``counter`` (default
``count``), at most ``MAX_HTTP_ROWS``.

Numbers are JSON **strings** (``"0.30000000000000000000000000000000000001"``): a JSON number is read by
JavaScript as a double, which keeps integers exactly only up to 2^53 and about 16 significant digits, and a
counter keeps 38; a string carries every digit and the page decides how to show it.

Answers: 200; 400 for what cannot be answered (a malformed key, an unknown or uncounted window, bad or too wide
bounds, an unknown query parameter), with the reason; 404 for any other path or method; 503 when DynamoDB
throttles (retry); 500 otherwise, never with a stack trace (that goes to the log). A key never counted is a
200 with empty counters: zero is an answer, not a missing resource. Reads go through ``tally.reader``, the
same path as ``tally get``; the function's role may only ``BatchGetItem`` and ``Query`` the counters table.
"""

from __future__ import annotations

import json
import os
from functools import cache
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote

import boto3
from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.event_handler import LambdaFunctionUrlResolver, Response
from botocore.config import Config

from tally.errors import InvalidReadError, RetryableStoreError
from tally.reader import CounterReader, iso_utc, parse_time_ms

if TYPE_CHECKING:
    from collections.abc import Mapping
    from decimal import Decimal

    from aws_lambda_powertools.utilities.typing import LambdaContext

MAX_HTTP_WINDOWS: Final = 1_000
"""Windows one request may ask for (41 days of hours): each is an item read and a line of the answer."""
MAX_BODY_BYTES: Final = 5_000_000
"""Below Lambda's 6 MB response limit (a window with hundreds of counters is large)."""
MAX_HTTP_ROWS: Final = 10_000
"""Rows ``top`` may ask for; a view read without ``top`` answers every value (within ``MAX_BODY_BYTES``)."""
QUERY_PARAMETERS: Final = frozenset({"window", "from", "to", "by", "at", "top", "counter"})
VIEW_PARAMETERS: Final = frozenset({"at", "top", "counter"})
HEADERS: Final = {"Cache-Control": "no-store"}
# An HTTP caller waits: short timeouts, botocore's standard retries of throttling.
CLIENT_CONFIG: Final = Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=2, read_timeout=5)

logger = Logger(service="tally")
tracer = Tracer(service="tally")
app = LambdaFunctionUrlResolver()


@cache
def reader() -> CounterReader:
    """Built on the first request of a container (``TALLY_COUNTERS_TABLE``, ``TALLY_HOT_KEYS``,
    ``TALLY_WINDOWS``, ``TALLY_COUNTER_VIEWS``), then reused (``cache_clear`` in tests)."""
    client = boto3.session.Session().client("dynamodb", config=CLIENT_CONFIG)
    built = CounterReader.from_environment(os.environ, client=client)
    return CounterReader(
        built.counters_table,
        client=client,
        hot_keys=built.hot_keys,
        windows=built.windows,
        max_series_windows=MAX_HTTP_WINDOWS,
        views=built.views,
    )


def _strings(values: Mapping[str, Decimal]) -> dict[str, str]:
    return {name: str(value) for name, value in sorted(values.items())}


def _json(status: int, payload: Mapping[str, Any], headers: Mapping[str, str] = HEADERS) -> Response[str]:
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return Response(status_code=status, content_type="application/json", body=body, headers=dict(headers))


@app.get("/counters/<key>")
def get_counters(key: str) -> Response[str]:
    try:
        decoded = unquote(key, errors="strict")
    except UnicodeDecodeError as exc:
        raise InvalidReadError("the key is not percent-encoded UTF-8") from exc
    query = app.current_event.query_string_parameters or {}
    unknown = sorted(set(query) - QUERY_PARAMETERS)
    if unknown:
        raise InvalidReadError(
            f"unknown query parameter(s) {', '.join(unknown)}: only window, from, to, by, at, top, counter"
        )
    if "by" in query:
        return _view(decoded, query)
    if VIEW_PARAMETERS & set(query):
        raise InvalidReadError("at, top and counter read a view: give by (a dimension, e.g. by=customer)")
    window = query.get("window")
    if window is None:
        if "from" in query or "to" in query:
            raise InvalidReadError("from and to need a window (minute, hour, day or month)")
        counters = reader().get(decoded)
        body: dict[str, object] = {"key": counters.key, "counters": _strings(counters.values)}
        if counters.gauges:  # only keys with gauges carry the field: earlier answers are unchanged
            body["gauges"] = {
                kind: {n: str(v) for n, v in sorted(g.items())} for kind, g in sorted(counters.gauges.items())
            }
        if counters.distinct:  # only keys with distinct counts carry the field
            body["distinct"] = _strings(counters.distinct)
        if counters.operators:  # only keys reset or corrected carry the field
            amount = {"reset": "value", "correction": "delta"}
            body["operators"] = {
                kind: {
                    name: {"at": iso_utc(r.at_ms), "at_ms": r.at_ms, "id": r.message_id, amount[kind]: str(r.amount)}
                    for name, r in sorted(records.items())
                }
                for kind, records in sorted(counters.operators.items())
            }
        return _json(200, body)
    bounds = [parse_time_ms(query[name]) if query.get(name) else None for name in ("from", "to")]
    series = reader().series(decoded, window, bounds[0], bounds[1])
    response = _json(
        200,
        {
            "key": series.key,
            "window": series.window,
            "windows": [
                {"start": iso_utc(w.start_ms), "counters": _strings(w.values)}
                | ({"distinct": _strings(w.distinct)} if w.distinct else {})
                for w in series.windows
            ],
        },
    )
    if len(response.body or "") > MAX_BODY_BYTES:
        raise InvalidReadError("the answer would exceed Lambda's 6 MB response limit: ask for fewer windows")
    return response


def _view(key: str, query: Mapping[str, str]) -> Response[str]:
    """``?by=``: a view's values in one window, or its top rows."""
    if "from" in query or "to" in query:
        raise InvalidReadError("a view is read in one window: at (default now), not from and to")
    if "at" in query and "window" not in query:
        raise InvalidReadError("at needs a window (minute, hour, day or month)")
    at_ms = parse_time_ms(query["at"]) if query.get("at") else None
    top = query.get("top")
    if top is not None and (not (top.isascii() and top.isdigit()) or not 1 <= int(top) <= MAX_HTTP_ROWS):
        raise InvalidReadError(f"top is a whole number from 1 to {MAX_HTTP_ROWS}")
    if top is None and "counter" in query:
        raise InvalidReadError("counter ranks the rows of top: give top too")
    group = reader().group(key, query["by"], query.get("window"), at_ms)
    rows = group.rows if top is None else tuple(group.top(int(top), query.get("counter") or "count"))
    response = _json(
        200,
        {
            "key": group.key,
            "view": group.view,
            "window": group.window,
            "start": None if group.start_ms is None else iso_utc(group.start_ms),
            "rows": [{"dims": dict(row.dims), "counters": _strings(row.counters)} for row in rows],
        },
    )
    if len(response.body or "") > MAX_BODY_BYTES:
        raise InvalidReadError("the answer would exceed Lambda's 6 MB response limit: ask for top rows")
    return response


@app.exception_handler(InvalidReadError)  # type: ignore[untyped-decorator]  # Powertools does not type it
def bad_request(exc: InvalidReadError) -> Response[str]:
    return _json(400, {"error": "bad_request", "message": str(exc)})


@app.exception_handler(RetryableStoreError)  # type: ignore[untyped-decorator]  # Powertools does not type it
def throttled(exc: RetryableStoreError) -> Response[str]:
    logger.warning("counters read throttled or interrupted", error=str(exc))
    return _json(503, {"error": "unavailable", "message": "try again"}, {**HEADERS, "Retry-After": "1"})


@app.exception_handler(Exception)  # type: ignore[untyped-decorator]  # Powertools does not type it
def internal_error(exc: Exception) -> Response[str]:
    logger.exception("counters read failed")  # the trace goes to the log, never to the caller
    return _json(500, {"error": "internal", "message": "the read failed; see the function's log"})


@app.not_found
def not_found(exc: Exception) -> Response[str]:
    return _json(
        404, {"error": "not_found", "message": "GET /counters/{percent-encoded key}[?window=&from=&to=][?by=&at=&top=]"}
    )


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Answer one function URL request."""
    return app.resolve(dict(event), context)
