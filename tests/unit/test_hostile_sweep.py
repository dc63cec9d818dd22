"""Hostile-tester regressions on ``sweep``'s grid, without a server.

* ``--vary "-c 1,01,2"`` made two cells of the same runs (one client),
  and the knee was found between them; a value given twice as two
  spellings of one number is now refused like one given twice.
* The values shown of a varied password are masked, and numbered when
  masking made them alike (the runs still get the real ones).
"""

from __future__ import annotations

import pytest

from pgsurge.errors import UsageError
from pgsurge.experiment.grid import cells, parse_vary


@pytest.mark.parametrize("spec", ["-c 1,01,2", "-R 100,1e2", "--rate 5,5.0"])
def test_one_number_spelt_twice_is_refused(spec: str) -> None:
    with pytest.raises(UsageError, match="a value given twice"):
        parse_vary(spec)


def test_names_stay_apart() -> None:
    assert parse_vary("-M simple,prepared").values == ("simple", "prepared")


def test_varied_passwords_are_shown_masked_and_run_as_given() -> None:
    env = parse_vary("PGPASSWORD s3cret,s3cretB")
    dsn = parse_vary("-d db1,host=h password=pw dbname=db2")
    assert env.shown == ("******** #1", "******** #2")
    assert dsn.shown == ("db1", "host=h password=******** dbname=db2")
    grid = cells([env, dsn])
    assert [c.values for c in grid][:2] == [
        ("******** #1", "db1"),
        ("******** #1", "host=h password=******** dbname=db2"),
    ]
    assert grid[1].env == {"PGPASSWORD": "s3cret"}
    assert grid[1].args == ("-d", "host=h password=pw dbname=db2")
    assert env.to_dict()["values"] == ["******** #1", "******** #2"]
