"""--json document: validates against result.schema.json in every shape,
never contains a password, carries mergeable histograms and series."""

from __future__ import annotations

import io
import json
import math

import jsonschema
import pytest

from pgsurge.config import ConnParams
from pgsurge.errors import PgsurgeError
from pgsurge.report.json import (
    build_document,
    load_schema,
    safe_conninfo,
    write_json,
)
from pgsurge.stats.histogram import Histogram
from tests.fix_data import config, make_result

VALIDATOR = jsonschema.Draft202012Validator(
    load_schema(), format_checker=jsonschema.FormatChecker()
)
SECRET = "s3cr3t-pw"


def check(doc: dict) -> dict:
    VALIDATOR.validate(doc)
    json.dumps(doc, allow_nan=False)
    return doc


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"throttled": True},
        {"nscripts": 1},
        {"interval": 0},
        {"record": False},
        {"empty": True},
        {"empty": True, "record": False, "nscripts": 1},
    ],
)
def test_every_shape_validates(kw) -> None:
    doc = check(build_document(make_result(**kw), config()))
    assert doc["schema"] == 1
    assert doc["tool"] == {"name": "pgsurge", "version": "0.1.0"}
    assert doc["server"] == {"version": "18.6", "version_num": 180006}


def test_totals_series_and_histograms() -> None:
    result = make_result(throttled=True)
    doc = check(build_document(result, config()))
    assert doc["start"] == "2023-11-14T22:13:30.000000Z"
    assert doc["duration_s"] == pytest.approx(3.005)
    t = doc["totals"]
    assert t["processed"] == result.total.cnt == 588
    assert t["failed"] == t["deadlock_failures"] == 12
    assert t["retried"] == 12 and t["retries"] == 24
    assert t["tps"] == pytest.approx(588 / 3.005)
    assert set(t["latency_ms"]["percentiles"]) >= {"50", "99.9", "100", "99.99"}
    assert t["latency_ms"]["percentiles"]["100"] == t["latency_ms"]["max"]
    assert t["lag_ms"]["count"] == 588
    # per-interval series: 3 whole seconds and a 5 ms tail
    ivs = doc["intervals"]
    assert [iv["offset_s"] for iv in ivs] == [0.0, 1.0, 2.0, 3.0]
    assert ivs[-1]["duration_s"] == pytest.approx(0.005)
    assert sum(iv["processed"] for iv in ivs) == 588
    assert ivs[0]["tps"] == ivs[0]["processed"]
    assert ivs[3]["latency_ms"] is None
    # the encoded histograms give back the merged ones
    back = Histogram.from_dict(doc["histograms"]["latency"])
    assert result.histograms is not None
    assert back == result.histograms.latency
    # per script and per command
    s0 = doc["scripts"][0]
    assert s0["processed"] + s0["failed"] == 300
    assert s0["failed"] == 0
    # the failures happened in the second script's first command
    assert doc["scripts"][1]["commands"][0]["failures"] == 12
    assert s0["commands"][0]["latency_ms"]["count"] == s0["processed"]
    assert s0["commands"][1]["latency_ms"] is None
    # CPU and aborts
    cpu = doc["client_cpu"]
    assert [w["worker_id"] for w in cpu["workers"]] == [0, 1]
    assert cpu["workers"][1]["utilisation"] == pytest.approx(0.9 / 3.005)
    assert cpu["workers"][1]["idle_us"] == 3_000_000
    assert cpu["workers"][1]["busy_fraction"] == pytest.approx(0.005 / 3.005)
    assert cpu["workers"][0]["busy_fraction"] == cpu["workers"][0]["utilisation"]
    assert not cpu["client_limited"]
    assert doc["aborted"] and doc["aborted_clients"] == 1
    assert doc["abort_messages"] == ["client 3 aborted in command 0 (SQL) of script 0"]


def test_empty_run_has_no_nan() -> None:
    doc = check(build_document(make_result(empty=True), config()))
    assert doc["totals"]["latency_ms"] is None
    assert doc["client_cpu"]["us_per_transaction"] is None
    assert not any(isinstance(v, float) and math.isnan(v) for v in _leaves(doc))


def _leaves(x):
    if isinstance(x, dict):
        for v in x.values():
            yield from _leaves(v)
    elif isinstance(x, list):
        for v in x:
            yield from _leaves(v)
    else:
        yield x


@pytest.mark.parametrize(
    "dbname",
    [
        f"host=db password={SECRET} dbname=bench",
        f"postgresql://bench:{SECRET}@db:5433/bench?sslmode=disable",
        f"postgresql://bench@db/bench?password={SECRET}",
        f"dbname=bench sslpassword={SECRET} passfile=/home/{SECRET}",
    ],
)
def test_no_password_ever(dbname: str, monkeypatch) -> None:
    monkeypatch.setenv("PGPASSWORD", SECRET)
    cfg = config(conn=ConnParams(host="db", user="bench", dbname=dbname))
    doc = check(build_document(make_result(), cfg))
    text = json.dumps(doc)
    assert SECRET not in text
    assert "password" not in text
    assert "bench" in doc["config"]["conn"]["dbname"]


def test_safe_conninfo_keeps_plain_names() -> None:
    assert safe_conninfo(ConnParams(dbname="my db")) == {
        "host": None,
        "port": None,
        "user": None,
        "dbname": "my db",
    }
    assert (
        safe_conninfo(ConnParams(dbname="a=b=c"))["dbname"] == "<unparsable conninfo>"
    )


def test_write_json_to_file_and_stdout(tmp_path) -> None:
    result, cfg = make_result(), config()
    path = tmp_path / "r.json"
    write_json(result, cfg, str(path))
    from_file = json.loads(path.read_text())
    out = io.StringIO()
    write_json(result, cfg, "-", stdout=out)
    assert json.loads(out.getvalue()) == from_file == build_document(result, cfg)
    check(from_file)


def test_write_json_error_is_a_user_error(tmp_path) -> None:
    bad = str(tmp_path / "no" / "r.json")
    with pytest.raises(PgsurgeError) as info:
        write_json(make_result(), config(), bad)
    assert info.value.message == (
        f'could not write JSON result to "{bad}": No such file or directory'
    )


def test_two_documents_merge_through_their_histograms() -> None:
    a = build_document(make_result(), config())
    b = build_document(make_result(throttled=True), config())
    ha = Histogram.from_dict(a["histograms"]["latency"])
    hb = Histogram.from_dict(b["histograms"]["latency"])
    ha.merge(hb)
    assert ha.count == a["totals"]["processed"] + b["totals"]["processed"]


def test_schema_documents_every_field() -> None:
    # the schema forbids unknown fields: a field added to the document
    # without the schema fails validation
    doc = build_document(make_result(), config())
    doc["totals"]["surprise"] = 1
    with pytest.raises(jsonschema.ValidationError):
        VALIDATOR.validate(doc)
