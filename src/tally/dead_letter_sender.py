"""The dead-letter adapter: poison records go to an SQS queue with their reason as message attributes.

Each dead letter keeps the original body byte for byte, so that after a fix it can be redriven into the
source and counted (once: its id is the producer's, and the markers still apply). A body SQS could not
carry as text (lone surrogates or other characters outside SQS's allowed set, or bytes that are not
UTF-8, as Kinesis may deliver) is sent base64-encoded, and says so in ``tally.body_encoding``.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import TYPE_CHECKING, Final

from botocore.exceptions import BotoCoreError, ClientError

from tally.core.batching import group
from tally.core.limits import SQS_BATCH_MAX_BYTES, SQS_BATCH_MAX_ENTRIES

if TYPE_CHECKING:
    from collections.abc import Sequence

    from mypy_boto3_sqs.client import SQSClient
    from mypy_boto3_sqs.type_defs import MessageAttributeValueTypeDef, SendMessageBatchRequestEntryTypeDef

    from tally.core.model import DeadLetter

ERROR_CODE: Final = "tally.error_code"
ERROR_MESSAGE: Final = "tally.error_message"
SOURCE: Final = "tally.source"
SOURCE_RECORD_ID: Final = "tally.source_record_id"
SOURCE_SHARD: Final = "tally.source_shard"
"""A Kinesis record's shard: its sequence number (``tally.source_record_id``) is unique within the shard only."""
BODY_ENCODING: Final = "tally.body_encoding"

_MAX_DETAIL_CHARS: Final = 1000
# Characters SQS accepts in a message body (its documented XML 1.0 set).
_NOT_SQS_TEXT: Final = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class SqsDeadLetterQueue:
    """Sends dead letters with ``SendMessageBatch``, reporting which records it could not hand over."""

    def __init__(self, client: SQSClient, queue_url: str) -> None:
        self._client = client
        self._queue_url = queue_url
        self._fifo = queue_url.endswith(".fifo")

    def send(self, letters: Sequence[DeadLetter]) -> frozenset[str]:
        """Send every letter; return the source record ids that did not reach the queue."""
        failed: set[str] = set()
        entries = [self._entry(str(index), letter) for index, letter in enumerate(letters)]
        for batch in group(entries, SQS_BATCH_MAX_ENTRIES, SQS_BATCH_MAX_BYTES, _entry_bytes):
            by_entry_id = {entry["Id"]: letters[int(entry["Id"])].record.record_id for entry in batch}
            try:
                response = self._client.send_message_batch(QueueUrl=self._queue_url, Entries=batch)
            except (ClientError, BotoCoreError):
                failed.update(by_entry_id.values())
                continue
            failed.update(by_entry_id[entry["Id"]] for entry in response.get("Failed", []))
        return frozenset(failed)

    def _entry(self, entry_id: str, letter: DeadLetter) -> SendMessageBatchRequestEntryTypeDef:
        body, encoding = _sqs_body(letter.record.body)
        attributes: dict[str, MessageAttributeValueTypeDef] = {
            ERROR_CODE: {"DataType": "String", "StringValue": str(letter.rejection.code)},
            ERROR_MESSAGE: {"DataType": "String", "StringValue": _sqs_text(letter.rejection.detail)},
            SOURCE_RECORD_ID: {"DataType": "String", "StringValue": letter.record.record_id},
        }
        source = letter.record.origin.get("source")
        if source:
            attributes[SOURCE] = {"DataType": "String", "StringValue": source}
        shard = letter.record.origin.get("shard")
        if shard:
            attributes[SOURCE_SHARD] = {"DataType": "String", "StringValue": shard}
        if encoding:
            attributes[BODY_ENCODING] = {"DataType": "String", "StringValue": encoding}
        entry: SendMessageBatchRequestEntryTypeDef = {
            "Id": entry_id,
            "MessageBody": body,
            "MessageAttributes": attributes,
        }
        if self._fifo:
            entry["MessageGroupId"] = letter.record.origin.get("message_group_id") or "tally-dead-letters"
            entry["MessageDeduplicationId"] = hashlib.sha256(f"{source}|{letter.record.record_id}".encode()).hexdigest()
        return entry


def _sqs_body(body: str | bytes) -> tuple[str, str | None]:
    if isinstance(body, str):
        if body and not _NOT_SQS_TEXT.search(body):
            return body, None
        raw = body.encode("utf-8", "surrogatepass")
    else:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            text = ""
        if text and not _NOT_SQS_TEXT.search(text):
            return text, None
        raw = body
    if not raw:
        return "(empty body)", "empty"  # SQS refuses empty bodies; the attribute keeps the truth
    return base64.b64encode(raw).decode("ascii"), "base64"


def _sqs_text(detail: str) -> str:
    return _NOT_SQS_TEXT.sub("\ufffd", detail)[:_MAX_DETAIL_CHARS] or "-"


def _entry_bytes(entry: SendMessageBatchRequestEntryTypeDef) -> int:
    size = len(entry["MessageBody"].encode("utf-8"))
    for name, value in entry.get("MessageAttributes", {}).items():
        size += len(name) + len(value["DataType"]) + len(value.get("StringValue", "").encode("utf-8"))
    return size
