"""Unit tests: `pytest` runs the task natively, with dagr_sdk.testing playing dagr."""

from dagr_sdk.testing import TestRun

from app import CsvSummary


def test_summarises_by_group():
    csv = "city,amount\nBerlin,10\nParis,5\n\nBerlin,2.5\n"
    outcome = TestRun().run(CsvSummary, {"csv": csv, "column": "amount", "group_by": "city"})
    assert outcome.output["rows"] == 3
    assert outcome.output["sum"] == 17.5
    assert outcome.output["groups"]["Berlin"] == {"count": 2, "sum": 12.5}
    assert outcome.logged("summarised 3 rows")


def test_names_the_bad_line():
    outcome = TestRun().run(CsvSummary, {"csv": "a,b\n1,2\n3,x", "column": "b"})
    assert outcome.error.message == 'line 3: `b` is not a number: "x"'
