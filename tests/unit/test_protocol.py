"""The parent <-> worker messages (pgsurge.engine.protocol) as values.

They are plain slotted classes (no dataclass: start-up cost), so what the
runner, the workers and the multi-host relay rely on is pinned here: they
cross a pipe by pickle unchanged, ``match`` binds their fields by
position, and they compare and print by field like the records they are.
"""

from __future__ import annotations

import pickle

import pytest

from pgsurge.engine import protocol
from pgsurge.stats.counters import StatsData

_SAMPLES = [
    protocol.Ready(),
    protocol.Steady(1_000, 2_000),
    protocol.Connected((11, 12)),
    protocol.Connected(),
    protocol.Go(),
    protocol.Progress(3, 4_000, StatsData()),
    protocol.ExitOnAbort(),
    protocol.Fatal("pgsurge: error: x\n"),
    protocol.Fatal(),
    protocol.Crash("Traceback ..."),
    protocol.Stop(),
]


@pytest.mark.parametrize("message", _SAMPLES, ids=repr)
def test_message_survives_pickle(message: object) -> None:
    for proto in range(2, pickle.HIGHEST_PROTOCOL + 1):
        copy = pickle.loads(pickle.dumps(message, proto))
        assert type(copy) is type(message)
        assert copy == message


def test_match_binds_fields_by_position() -> None:
    stats = StatsData()
    msg: object = protocol.Progress(7, 8, stats)
    match msg:
        case protocol.Progress(tick, now, got, intervals):
            assert (tick, now, got, intervals) == (7, 8, stats, ())
        case _:
            raise AssertionError(msg)
    match protocol.Fatal("t"):
        case protocol.Fatal(text):
            assert text == "t"
    match protocol.Steady(5, 6):
        case protocol.Steady(start, end):
            assert (start, end) == (5, 6)


def test_equality_repr_and_slots() -> None:
    assert protocol.Steady(1, 2) == protocol.Steady(1, 2)
    assert protocol.Steady(1, 2) != protocol.Steady(1, 3)
    assert protocol.Go() != protocol.Ready()
    assert protocol.Fatal() == protocol.Fatal(None)
    assert hash(protocol.Steady(1, 2)) == hash(protocol.Steady(1, 2))
    assert repr(protocol.Steady(1, 2)) == "Steady(start_us=1, end_us=2, window_us=0)"
    assert repr(protocol.Go()) == "Go()"
    assert repr(protocol.Fatal("x")) == "Fatal(text='x')"
    with pytest.raises(AttributeError):
        protocol.Steady(1, 2).start = 3  # type: ignore[attr-defined]
    for message in _SAMPLES:
        assert not hasattr(message, "__dict__")
