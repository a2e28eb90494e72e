"""What a chaos run sees of the fenced apply (``tally.core.fence``): its requests told apart, its situations counted.

A fenced journal batch makes three kinds of plain ``UpdateItem`` (no transaction), which the store faults of
``tally_local.chaos.faults`` reach as they reach any request, and which this module names by what they carry:

- ``write``: one part of one item, its ADDs and its epoch's mark (``f#<epoch>``), conditioned on the mark (a refusal
  means the part is on the item already), sometimes removing other epochs' marks (a prune);
- ``commit``: the batch's header PREPARING -> FENCED, alone (a state code without the fenced path refuses to finish);
- ``done``: the header FENCED -> DONE, with ``done_at``.

``FencedWatch`` (one per consumer, on its client) counts, as ``situation.fenced_*``: each kind of request and each
fault drawn on it, the writes sent by a container that did not commit their batch (a finisher: the owner was killed
after its n-th write, or left the batch for later), the writes refused as applied already, the prunes, and the
items whose answer shows the marks of several epochs (several containers on one item). What it counts is what the
run's tests require a configuration to draw.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any, Final, Protocol

from tally.core.fence import mark_batch
from tally.core.ledger import BatchState
from tally.store.expressions import FENCE_MARK, FENCE_NAME
from tally.store.schema import FENCE_PREFIX

UPDATE: Final = "UpdateItem"
_HEADER_MOVES: Final = {
    (BatchState.PREPARING.value, BatchState.FENCED.value): "commit",
    (BatchState.FENCED.value, BatchState.DONE.value): "done",
}


class Counts(Protocol):
    """Where the situations are counted (``tally_local.chaos.faults.FaultLog``, which imports this module)."""

    def add(self, name: str, count: int = 1) -> None: ...


@dataclass(frozen=True, slots=True)
class FencedRequest:
    """One request of the fenced apply: its kind and the batch it serves (its id)."""

    role: str
    """``write``, ``commit`` or ``done``."""
    batch_id: str
    prunes: bool = False
    """A ``write`` that also removes other epochs' marks."""


def fenced_request(operation: str, params: dict[str, Any]) -> FencedRequest | None:
    """The fenced apply's request ``params`` is, or None (any other request)."""
    if operation != UPDATE:
        return None
    request = json.loads(params["body"])
    names = request.get("ExpressionAttributeNames", {})
    values = request.get("ExpressionAttributeValues", {})
    if FENCE_NAME in names:
        batch = mark_batch(names[FENCE_NAME].removeprefix(FENCE_PREFIX), int(values[FENCE_MARK]["N"]))
        if batch is None:
            return None
        return FencedRequest("write", batch.batch_id, prunes=" REMOVE " in request.get("UpdateExpression", ""))
    move = (values.get(":expected", {}).get("S"), values.get(":new", {}).get("S"))
    role = _HEADER_MOVES.get(move)
    if role is None:
        return None
    header = next((value["S"] for value in request.get("Key", {}).values() if "S" in value), "")
    return FencedRequest(role, header.removeprefix("b#"))


class FencedWatch:
    """Counts one consumer's fenced requests and what they met (``situation.fenced_*``)."""

    def __init__(self, log: Counts) -> None:
        self._log = log
        self._lock = threading.Lock()
        self._committed_here: set[str] = set()
        """Batches this container committed: a write of any other batch is a finisher's."""
        self.container_fenced = True
        """The container applies its own journal batches fenced; False: by chunk transactions (its fenced writes are
        all a finisher's, of fenced containers' batches: a mixed fleet)."""

    def restarted(self) -> None:
        """A new execution environment: the batches the old one committed are another container's now."""
        with self._lock:
            self._committed_here.clear()

    def sent(self, request: FencedRequest) -> None:
        """Before ``request`` is sent."""
        log = self._log
        log.add(f"situation.fenced_{request.role}s")
        with self._lock:
            if request.role == "commit":
                self._committed_here.add(request.batch_id)
            own = request.batch_id in self._committed_here
        if not own and request.role in ("write", "done"):
            log.add(f"situation.fenced_{request.role}s_by_a_finisher")
            if not self.container_fenced:
                log.add(f"situation.fenced_{request.role}s_by_a_chunked_container")
        if request.prunes:
            log.add("situation.fenced_prunes_sent")

    def faulted(self, request: FencedRequest, kind: str) -> None:
        """A fault of ``kind`` drawn on ``request``."""
        self._log.add(f"situation.fenced_{request.role}_{kind}")

    def answered(self, request: FencedRequest, parsed: dict[str, Any]) -> None:
        """``request``'s answer (a write's: the item's attributes after it, or as they were when refused)."""
        if request.role != "write":
            return
        refused = "Error" in parsed
        if refused:
            self._log.add("situation.fenced_writes_refused")
        item = parsed.get("Item" if refused else "Attributes") or {}
        epochs = sum(1 for name in item if name.startswith(FENCE_PREFIX))
        if epochs >= 2:
            self._log.add("situation.fenced_items_marked_by_several_epochs")
        if epochs >= 4:
            self._log.add("situation.fenced_items_marked_by_four_epochs_or_more")
