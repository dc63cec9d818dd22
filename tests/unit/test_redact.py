"""``pgsurge.redact``: every password form masked, the rest kept."""

from __future__ import annotations

import json

import pytest

from pgsurge.redact import MASK, redact_env, redact_text, redact_value, redact_words

#: (text, the secret that must go, what must stay)
CASES = [
    ("postgresql://u:pw1@h/db", "pw1", "postgresql://u:"),
    ("postgres://u:p@ss:w@rd@host:5432/db", "ss:w@rd", "@host:5432/db"),
    ("postgresql://bob:s%40cret@h/db?sslmode=require", "s%40cret", "sslmode=require"),
    ("'postgresql://u:quoted@h/db'", "quoted", "@h/db'"),
    ("postgresql://h/db?password=qp&port=5", "qp", "&port=5"),
    ("postgresql://h/db?sslmode=off&pass%77ord=enc", "enc", "sslmode=off"),
    ("host=h password=kw port=5432", "kw", "port=5432"),
    ("host=h password = 'a b\\' c' port=5432", "a b", "port=5432"),
    ('password="dq x"', "dq x", "password="),
    ("PGPASSWORD=envpw pgsurge -S", "envpw", "pgsurge -S"),
    ("sslpassword=keypw", "keypw", "sslpassword="),
    ("MY_TOKEN=tok", "tok", "MY_TOKEN="),
    # SQL (pg_stat_statements keeps a utility statement's literals)
    ("ALTER ROLE r PASSWORD 'sq l@x' LOGIN", "sq l@x", "' LOGIN"),
    ("CREATE ROLE r ENCRYPTED PASSWORD 'it''s'", "it''s", "ENCRYPTED PASSWORD '"),
    ("OPTIONS (user 'bob', password 'um')", "um'", "(user 'bob', password '"),
    ("alter user u password E'e\\'sc'", "sc", "alter user u password '"),
    ("alter role r password $q$dol$q$ login", "dol", "' login"),
    ("ALTER ROLE r PASSWORD 'cut sho", "cut sho", "ALTER ROLE r PASSWORD '"),
]


@pytest.mark.parametrize(("text", "secret", "kept"), CASES)
def test_every_password_form_is_masked(text: str, secret: str, kept: str) -> None:
    out = redact_text(text)
    assert secret not in out and MASK in out
    assert kept in out


@pytest.mark.parametrize(
    "text",
    [
        "postgresql://h:5432/db",
        "postgresql://u@h/db",
        "passfile=/home/u/.pgpass PGPASSFILE=/x",
        "host=h port=5 dbname=bench",
        "-c 4 -j 2 -T 10",
        "SELECT 'password' FROM t WHERE user = 'x'",
        "ALTER ROLE r PASSWORD NULL",
        'FATAL:  password authentication failed for user "bob"',
    ],
)
def test_nothing_else_changes(text: str) -> None:
    assert redact_text(text) == text


def test_words_env_and_trees() -> None:
    words = ["--a-env=PGPASSWORD=a b", "PGPASSWORD=c d", "-d", "host=x password=y"]
    out = redact_words(words)
    assert out == ["--a-env=PGPASSWORD=" + MASK, "PGPASSWORD=" + MASK, "-d", out[3]]
    assert "y" not in out[3].split("password=")[1]
    env = redact_env({"PGPASSWORD": "s", "PGOPTIONS": "-c jit=off"})
    assert env == {"PGPASSWORD": MASK, "PGOPTIONS": "-c jit=off"}
    tree = redact_value({"password": "x", "a": ["postgresql://u:zz@h"], "n": 1})
    assert tree == {"password": MASK, "a": [f"postgresql://u:{MASK}@h"], "n": 1}


def test_html_verdict_card_gives_no_verdict_without_spread() -> None:
    from pgsurge.report.verdict import compare_tps

    v = compare_tps([1000.0, 1010.0, 990.0], [1200.0, 1200.0])
    assert (v.verdict, v.ci) == ("no verdict", None)
    assert "spread is not measured" in v.note


def test_run_json_masks_a_password_wherever_it_hides() -> None:
    from pgsurge.config import ConnParams
    from pgsurge.report.json import build_document
    from tests.fix_data import config, make_result

    uri = "postgresql://u:uri-pw@h/db?password=q-pw"
    cfg = config(
        conn=ConnParams(host="/tmp", user="bench", dbname=uri),
        defines=(("PGPASSWORD", "def-pw"), ("n", "1")),
    )
    text = json.dumps(build_document(make_result(), cfg))
    for secret in ("uri-pw", "q-pw", "def-pw"):
        assert secret not in text
    assert '"n": "1"' in text
