"""``pgsurge.records.record`` behaves as ``dataclasses.dataclass``.

The same class body is decorated both ways, for each combination of the
arguments pgsurge uses (frozen, slots, eq, repr), and each behaviour is
compared: construction (positional, keywords, defaults, factories,
``init=False`` fields, wrong arguments), repr, equality and hash, the
frozen errors, pickling and copying, ``dataclasses.fields``/``replace``/
``asdict``/``is_dataclass``, ``__match_args__``, ``__slots__``,
inheritance, and a class's own ``__eq__``/``__hash__``/``__repr__`` kept.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import pickle
import re
from collections.abc import Callable
from typing import Any

import pytest

from pgsurge.records import record

_FLAGS = [
    dict(zip(("frozen", "slots", "eq", "repr"), values, strict=True))
    for values in itertools.product((False, True), repeat=4)
]


def _classes(decorate: Callable[..., Any], flags: dict[str, bool]) -> Any:
    """A base class and a subclass, decorated with ``decorate(**flags)``
    (a new pair on each call: they are module-level for pickle)."""

    @decorate(**flags)
    class Base:
        a: int
        b: str = "x"

    @decorate(**flags)
    class Sub(Base):
        c: tuple[int, ...] = dataclasses.field(default_factory=tuple)
        d: float = dataclasses.field(default=0.5, compare=False)
        e: Any = dataclasses.field(default=None, init=False, repr=False)
        f: list[int] = dataclasses.field(default_factory=list, init=False, hash=False)

    Base.__qualname__ = Sub.__qualname__ = "Sub"  # the same repr both ways
    return Base, Sub


def _outcome(func: Callable[[], Any]) -> Any:
    try:
        return ("ok", func())
    except Exception as exc:  # the error class and text are compared
        return (type(exc).__name__, str(exc))


def _repr(value: object) -> str:
    """``repr(value)`` without the address of an object's default repr."""
    return re.sub(r" at 0x[0-9a-f]+", "", repr(value))


def _behaviour(cls: Any) -> list[Any]:
    one = cls(1, "y", (2,), 1.5)
    same = cls(1, "y", (2,), 2.5)  # d takes no part in equality
    other = cls(2)
    out: list[Any] = [
        _repr(one),
        _repr(cls(a=3)),
        one == same,
        one != other,
        one == "x",
        _outcome(lambda: hash(one) == hash(same)),
        _outcome(lambda: cls()),
        _outcome(lambda: cls(1, e=2)),
        _outcome(lambda: setattr(cls(1), "a", 5)),
        _outcome(lambda: delattr(cls(1), "b")),
        _outcome(lambda: setattr(cls(1), "zz", 5)),
        (one.a, one.b, one.c, one.d, one.e, one.f),
        [f.name for f in dataclasses.fields(cls)],
        cls.__match_args__,
        "__slots__" in vars(cls),
        dataclasses.is_dataclass(one),
        dataclasses.asdict(one),
        _outcome(lambda: _repr(dataclasses.replace(one, b="z", d=9.0))),
        _outcome(lambda: dataclasses.replace(one, e=1)),
        cls(1).c is not cls(1).c or cls(1).c == (),
        cls(1).f is not cls(1).f,
    ]
    clones = (copy.copy(one), copy.deepcopy(one), pickle.loads(pickle.dumps(one)))
    out.extend((_repr(c), c == one, c.e, c.f) for c in clones)
    return out


@pytest.mark.parametrize("flags", _FLAGS, ids=lambda f: ",".join(k for k in f if f[k]))
def test_record_behaves_as_dataclass(flags: dict[str, bool]) -> None:
    base_r, sub_r = _classes(record, flags)
    base_d, sub_d = _classes(dataclasses.dataclass, flags)
    # pickle finds the classes by module and name: one pair at a time
    results: dict[str, list[Any]] = {}
    for name, (base, sub) in (("r", (base_r, sub_r)), ("d", (base_d, sub_d))):
        globals()["Sub"] = sub
        sub.__module__ = __name__
        got = _behaviour(sub)
        results[name] = got
        if flags["repr"]:
            assert repr(base(1)) == "Sub(a=1, b='x')"
    assert results["r"] == results["d"]


def test_class_methods_of_its_own_are_kept() -> None:
    for decorate in (record, dataclasses.dataclass):

        @decorate(frozen=True, slots=True)
        class Own:
            value: int

            def __eq__(self, other: object) -> bool:
                return isinstance(other, Own) and other.value % 2 == self.value % 2

            def __hash__(self) -> int:
                return self.value % 2

            def __repr__(self) -> str:
                return "own"

        assert Own(1) == Own(3)
        assert hash(Own(5)) == 1
        assert repr(Own(2)) == "own"

    for decorate in (record, dataclasses.dataclass):

        @decorate(slots=True)
        class Mutable:
            value: int

        assert Mutable.__hash__ is None  # eq without frozen: unhashable
        m = Mutable(1)
        m.value = 2
        assert m == Mutable(2)


@pytest.mark.parametrize("slots", [False, True])
def test_a_recursive_repr_as_dataclass_writes_it(slots: bool) -> None:
    # an object inside itself is "..." (reprlib.recursive_repr's guard, one
    # for all records), also through another record, and once it is done
    # its repr is whole again
    got = []
    for decorate in (record, dataclasses.dataclass):

        @decorate(slots=slots)
        class Node:
            items: list[Any]

        @decorate(slots=slots)
        class Pair:
            left: Any
            right: Any

        outer = Node([])
        outer.items.append(outer)
        outer.items.append(Pair(outer, Node([1])))
        got.append((repr(outer), repr(outer), repr(Pair(outer, outer))))
    assert got[0] == got[1]
    assert got[0][0].count("...") == 2


def test_unsupported_fields_are_refused() -> None:
    with pytest.raises(TypeError, match="__post_init__"):

        @record
        class Post:
            a: int

            def __post_init__(self) -> None:
                pass


def test_a_plain_run_builds_no_dataclass_of_its_own() -> None:
    # the records of the modules a run loads are all record's (it asks
    # dataclasses for init=False): a @dataclass back on a run's module
    # compiles its methods at every start-up again
    from tests.fix_run import python_c

    code = (
        "import sys, dataclasses\n"
        "from pgsurge.cli import main\n"
        "main(['pgsurge', '-h', '/nonexistent/pgsurge', '-S', '-t', '1', 'x'])\n"
        "found = set()\n"
        "for name, module in list(sys.modules.items()):\n"
        "    if not name.startswith('pgsurge'):\n"
        "        continue\n"
        "    for value in vars(module).values():\n"
        "        if isinstance(value, type) and value.__module__ == name\\\n"
        "                and dataclasses.is_dataclass(value):\n"
        "            init = value.__dataclass_params__.init\n"
        "            kind = 'dataclass' if init else 'record'\n"
        "            found.add(f'{kind} {name}.{value.__qualname__}')\n"
        "print('\\n'.join(sorted(found)))\n"
    )
    found = python_c(code).split("\n")
    assert "record pgsurge.script.ast.SqlCommand" in found
    assert "record pgsurge.config.RunConfig" in found
    assert [line for line in found if line.startswith("dataclass ")] == []
