"""A batch writes plain values into its statements' text, and nothing that PartiQL could read as syntax.

botocore serialises each parameter against DynamoDB's ``AttributeValue`` union (about 4 µs each):
``statements.batch`` turns numbers and plain strings into literals. What MiniStack makes of the
result, record for record, is ``tests/integration/test_batched_writes.py``'s subject.
"""

from __future__ import annotations

import pytest

from sqsjobs.store import statements
from sqsjobs.store.codec import nonce

TEXT = 'UPDATE "t" SET "status" = ?, "attempt" = ?, "error" = ? WHERE "id" = ? AND "claim_token" = ?'


def test_numbers_and_plain_strings_become_literals_and_the_rest_stay_parameters_in_order():
    token = nonce()
    statement = {
        "Statement": TEXT,
        "Parameters": [{"S": "running"}, {"N": "2"}, {"S": "it's broken"}, {"S": "job-1:a#b"}, {"S": token}],
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    (out,) = statements.batch([statement])["Statements"]
    assert out == {
        "Statement": 'UPDATE "t" SET "status" = \'running\', "attempt" = 2, "error" = ? '
        f"WHERE \"id\" = 'job-1:a#b' AND \"claim_token\" = '{token}'",
        "Parameters": [{"S": "it's broken"}],
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


def test_a_statement_of_plain_values_only_carries_no_parameters():
    statement = {
        "Statement": 'UPDATE "t" SET "n" = ? WHERE "id" = ?',
        "Parameters": [{"N": "1500.25"}, {"S": "a"}],
    }
    assert statements.inlined(statement) == {"Statement": 'UPDATE "t" SET "n" = 1500.25 WHERE "id" = \'a\''}


@pytest.mark.parametrize(
    "value",
    [
        {"S": "it's"},
        {"S": "a b"},
        {"S": "back\\slash"},
        {"S": "what?"},
        {"S": 'double"quote'},
        {"S": "new\nline"},
        {"S": ""},
        {"S": "x" * 257},
        {"N": "-1"},
        {"N": "1.5e3"},
        {"N": "1; DROP"},
        {"N": "NaN"},
        {"M": {"a": {"S": "b"}}},
        {"L": []},
        {"B": b"\x00"},
        {"BOOL": True},
        {"NULL": True},
        {"SS": ["a"]},
    ],
)
def test_a_value_that_is_not_plain_stays_a_parameter(value):
    assert statements.literal(value) is None
    statement = {"Statement": 'UPDATE "t" SET "v" = ? WHERE "id" = ?', "Parameters": [value, {"S": "a"}]}
    assert statements.inlined(statement) == {
        "Statement": 'UPDATE "t" SET "v" = ? WHERE "id" = \'a\'',
        "Parameters": [value],
    }


def test_a_statement_whose_placeholders_do_not_match_its_parameters_is_left_as_it_is():
    statement = {"Statement": 'UPDATE "t" SET "v" = ? WHERE "id" = ?', "Parameters": [{"S": "a"}]}
    assert statements.inlined(statement) == statement
