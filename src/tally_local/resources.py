"""What a local stack is, once it runs: its endpoints and the local names of the template's resources.

It sits below both the code that creates a stack (``tally_local.stack``) and the code that runs its event
source mappings (``tally_local.mappings``), so neither has to import the other (no import
cycles). It owns the local account, region and credentials and the logical ids tally's tools look up;
it creates nothing and starts nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from tally_local.kit.clients import local_client

LOCAL_ACCOUNT: Final = "123456789012"
LOCAL_REGION: Final = "us-east-1"
LOCAL_CREDENTIALS: Final = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}
COUNTERS: Final = "CountersTable"
MARKERS: Final = "MarkersTable"
SOURCE_QUEUE: Final = "EventsQueue"
DEAD_LETTER_QUEUE: Final = "EventsDeadLetterQueue"
STREAM: Final = "EventStream"
ARCHIVE: Final = "ArchiveBucket"


@dataclass(frozen=True, slots=True)
class LocalResources:
    """Endpoints and the names the local stack gave the template's resources."""

    stack_name: str
    template: dict[str, Any]
    """The template with the stack's parameter overrides applied (see ``with_parameters``)."""
    dynamodb_endpoint: str
    aws_endpoint: str
    """The moto server: SQS, Kinesis, S3 and CloudFormation."""
    physical_ids: dict[str, str]
    """Logical id -> what ``!Ref`` gives in CloudFormation: table name, queue URL, stream name."""
    arns: dict[str, str]
    outputs: dict[str, str]
    settings: dict[str, str] = field(default_factory=dict)
    """The function's ``TALLY_*`` environment (tables, DLQ, windows, hot keys), as the template sets it."""
    region: str = LOCAL_REGION

    @property
    def counters_table(self) -> str:
        return self.physical_ids[COUNTERS]

    @property
    def markers_table(self) -> str:
        return self.physical_ids[MARKERS]

    @property
    def dead_letter_queue_url(self) -> str:
        return self.physical_ids[DEAD_LETTER_QUEUE]

    @property
    def queue_url(self) -> str | None:
        return self.physical_ids.get(SOURCE_QUEUE)

    @property
    def stream_name(self) -> str | None:
        return self.physical_ids.get(STREAM)

    @property
    def archive_bucket(self) -> str | None:
        """The archive's bucket in moto's S3 (None: ``ArchiveEnabled=false``)."""
        return self.physical_ids.get(ARCHIVE)

    def client_environment(self) -> dict[str, str]:
        """What points boto3 (and so the handler and ``tally``) at the local endpoints."""
        return {
            **LOCAL_CREDENTIALS,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            "AWS_ENDPOINT_URL": self.aws_endpoint,
            "AWS_ENDPOINT_URL_DYNAMODB": self.dynamodb_endpoint,
        }

    def cli_environment(self) -> dict[str, str]:
        """The variables for ``tally`` commands: endpoints, credentials, and the function's ``TALLY_*`` settings
        (tables, dead-letter queue, windows, hot keys), plus the source queue and stream."""
        environment = {**self.client_environment(), **self.settings, "TALLY_STACK": self.stack_name}
        if self.queue_url is not None:
            environment["TALLY_QUEUE_URL"] = self.queue_url
        if self.stream_name is not None:
            environment["TALLY_STREAM_NAME"] = self.stream_name
        return environment

    def client(self, service: str) -> Any:
        """A boto3 client on the local endpoint of ``service`` (dummy credentials)."""
        endpoint = self.dynamodb_endpoint if service in {"dynamodb", "dynamodbstreams"} else self.aws_endpoint
        return local_client(
            service,
            endpoint,
            region=self.region,
            access_key=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            secret_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )
