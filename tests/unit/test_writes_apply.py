"""Every write to the table goes through ``store/``: outside it, a module applies a typed write and reads
``Landed`` or ``Refused``; it never sends a DynamoDB write itself nor tells a refusal from an error.

Read from the source, as a reviewer would grep: a new ``Call("dynamodb", "update_item", ...)`` or
``is_conflict`` outside ``store/`` fails here, naming the module.
"""

from __future__ import annotations

import re
from pathlib import Path

SQSJOBS = Path(__file__).resolve().parents[2] / "sqsjobs"
#: The DynamoDB operations that write items (table administration, such as TTL or streams, is not).
ITEM_WRITES = {
    "put_item",
    "update_item",
    "delete_item",
    "transact_write_items",
    "batch_write_item",
    "batch_execute_statement",
    "execute_statement",
    "execute_transaction",
}
_DYNAMODB_CALL = re.compile(r'Call\(\s*"dynamodb",\s*"(\w+)"')
#: What reading a refusal by hand looks like: the error code, or the store's own test of it.
_REFUSAL_READS = re.compile(
    r"\bis_conflict\b|\bCCF\b|ConditionalCheckFailedException|TransactionCanceledException|shows_own_write"
)


def outside_store() -> dict[str, str]:
    return {
        str(path.relative_to(SQSJOBS)): path.read_text()
        for path in sorted(SQSJOBS.rglob("*.py"))
        if path.relative_to(SQSJOBS).parts[0] != "store"
    }


def test_no_module_outside_store_sends_an_item_write_itself():
    sent = {
        module: sorted(set(_DYNAMODB_CALL.findall(source)) & ITEM_WRITES)
        for module, source in outside_store().items()
    }
    assert {m: ops for m, ops in sent.items() if ops} == {}


def test_no_module_outside_store_tells_a_refusal_from_an_error():
    reads = {
        module: sorted(set(_REFUSAL_READS.findall(source))) for module, source in outside_store().items()
    }
    assert {m: found for m, found in reads.items() if found} == {}


def test_the_checks_would_see_a_write_and_a_refusal_read():
    assert _DYNAMODB_CALL.findall('yield Call(\n    "dynamodb", "update_item", params)') == ["update_item"]
    assert _REFUSAL_READS.findall("if codec.is_conflict(exc):") == ["is_conflict"]
