"""``python -m tally_local.stack --param NAME=VALUE``: a value the template refuses is answered in one line, naming
what is allowed, before anything starts (as ``tally`` answers a bad option), never with a traceback."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tally_local.stack import main


@pytest.mark.parametrize(
    ("parameter", "said"),
    [
        ("Source=sqs", "Source='sqs' is not one of SQS, Kinesis, Both"),
        ("Sorce=SQS", "Sorce is not a parameter of template.yaml: did you mean Source?"),
        ("BatchSize=0", "BatchSize='0' is outside [1, 10000]"),
        ("BatchSize=ten", "BatchSize='ten' is not a number"),
        ("StreamFailureDestination=S3", "the local stack does not emulate StreamFailureDestination=S3"),
        ("Source", "'Source': expected NAME=VALUE"),
        ("CounterBounds=stock:*#stock>=1e", "counter bound 'stock:*#stock>=1e': '1e' is not a number"),
    ],
    ids=["value", "name", "range", "number", "not-emulated", "no-value", "setting"],
)
def test_a_parameter_the_template_refuses_is_one_line_naming_what_is_allowed(parameter: str, said: str) -> None:
    result = CliRunner().invoke(main, ["--param", parameter])
    assert isinstance(result.exception, SystemExit), result.exception  # an answer, not a traceback
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith("Error: --param ")
    assert said in line
