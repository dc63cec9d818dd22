"""``record``: the standard ``dataclass`` decorator at a fraction of its start-up.

Every run imports some forty dataclasses (the configuration, the script's
parse tree, the engine's structs, the results), and ``dataclass`` writes
the source of each generated method and compiles it: a frozen class with
slots costs some 3.5 million instructions, the forty together about a
quarter of a run's start-up CPU (the side-by-side suite charges start-up
to the client CPU per transaction: a ``-C`` run does few transactions a
second). ``record`` takes the same arguments and gives classes that behave
the same:

* the fields are collected by ``dataclasses`` itself (``init``, ``repr``
  and ``eq`` off, so nothing is compiled there): ``dataclasses.fields``,
  ``replace``, ``asdict`` and ``is_dataclass`` work on them, with
  ``__match_args__`` and ``slots=True`` as a dataclass has them;
* ``__init__`` is the one ``dataclass`` writes (the same parameters,
  defaults, ``default_factory`` and ``init=False`` fields, ``object.
  __setattr__`` when frozen): the only method compiled, since it is the
  one that runs often;
* ``__repr__``, ``__eq__``, ``__hash__`` (``dataclass``'s rules: kept when
  the class defines it, None for an unfrozen class with ``eq``), the
  frozen ``__setattr__``/``__delattr__`` (``FrozenInstanceError``) and the
  frozen slotted class's ``__getstate__``/``__setstate__`` are shared
  functions reading the class's field names, nothing compiled per class;
* a class without a docstring gets a short one (``Name(a, b)``):
  ``dataclass`` builds it with ``inspect.signature``, which costs more than
  the rest.

Not supported, refused with a TypeError: ``order``, ``unsafe_hash``,
``kw_only``, ``InitVar`` and ``ClassVar`` fields, ``__post_init__`` (no
record uses them). tests/unit/test_records.py compares each behaviour
with ``dataclass``'s.
"""

from __future__ import annotations

import dataclasses
from _thread import get_ident
from collections.abc import Callable
from dataclasses import MISSING, FrozenInstanceError
from typing import Any, TypeVar, dataclass_transform, overload

__all__ = ["record"]

_T = TypeVar("_T", bound=type)


@overload
def record(cls: _T, /) -> _T: ...


@overload
def record(
    *, frozen: bool = False, slots: bool = False, eq: bool = True, repr: bool = True
) -> Callable[[_T], _T]: ...


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def record(
    cls: _T | None = None,
    /,
    *,
    frozen: bool = False,
    slots: bool = False,
    eq: bool = True,
    repr: bool = True,
) -> _T | Callable[[_T], _T]:
    """``dataclass(cls, frozen=, slots=, eq=, repr=)``, built without
    compiling more than ``__init__`` (see the module's docstring)."""

    def wrap(cls: _T) -> _T:
        return _process(cls, frozen=frozen, slots=slots, eq=eq, repr=repr)

    return wrap if cls is None else wrap(cls)


def _process(cls: _T, *, frozen: bool, slots: bool, eq: bool, repr: bool) -> _T:
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"record {cls.__name__}: __post_init__ is not supported")
    own = vars(cls)
    has_eq = "__eq__" in own
    class_hash = own.get("__hash__", MISSING)
    explicit_hash = not (class_hash is MISSING or (class_hash is None and has_eq))
    if "__doc__" not in own or own["__doc__"] is None:
        annotated = list(own.get("__annotations__", {}))
        cls.__doc__ = f"{cls.__name__}({', '.join(annotated)})"
    # the class as written: dataclass's frozen __setattr__ names it, not the
    # class slots=True makes of it (so that assigning a name that is not a
    # field raises the TypeError it raises from a dataclass)
    written = cls
    cls = dataclasses.dataclass(  # type: ignore[assignment]
        cls, init=False, repr=False, eq=False, frozen=False, slots=slots
    )
    fields = dataclasses.fields(cls)
    if len(fields) != len(cls.__dataclass_fields__):  # type: ignore[attr-defined]
        raise TypeError(f"record {cls.__name__}: no ClassVar or InitVar fields")
    cls.__init__ = _make_init(cls, fields, frozen)  # type: ignore[misc]
    names = tuple(f.name for f in fields)
    if repr:
        shown = tuple(f.name for f in fields if f.repr)
        if "__repr__" not in own:
            cls.__repr__ = _make_repr(shown)  # type: ignore[assignment, method-assign]
    if eq:
        compared = tuple(f.name for f in fields if f.compare)
        if not has_eq:
            cls.__eq__ = _make_eq(compared)  # type: ignore[assignment, method-assign]
        if not explicit_hash:
            if frozen:
                hashed = tuple(
                    f.name for f in fields if (f.compare if f.hash is None else f.hash)
                )
                cls.__hash__ = _make_hash(hashed)  # type: ignore[assignment, method-assign]
            else:
                cls.__hash__ = None  # type: ignore[assignment]
    if frozen:
        # (the names' tuple, not a set of them: a few names, and a
        # frozenset is some 700 bytes of each frozen class, issue 25)
        cls.__setattr__ = _make_setattr(written, names)  # type: ignore[assignment, method-assign]
        cls.__delattr__ = _make_delattr(written, names)  # type: ignore[assignment, method-assign]
        if slots:
            setattr(cls, "__getstate__", _make_getstate(names))  # noqa: B010
            setattr(cls, "__setstate__", _make_setstate(names))  # noqa: B010
    return cls


def _make_init(cls: type, fields: tuple[Any, ...], frozen: bool) -> Any:
    """``__init__`` as ``dataclass`` writes it (one compile)."""
    ns: dict[str, Any] = {"MISSING": MISSING, "__builtins__": __builtins__}
    params = ["self"]
    body = []
    for f in fields:
        default = f"__default_{f.name}"
        if f.default is not MISSING:
            ns[default] = f.default
        elif f.default_factory is not MISSING:
            ns[default] = f.default_factory
        if f.init:
            if f.default is not MISSING:
                params.append(f"{f.name}={default}")
                value = f.name
            elif f.default_factory is not MISSING:
                params.append(f"{f.name}=MISSING")
                value = f"{default}() if {f.name} is MISSING else {f.name}"
            else:
                params.append(f.name)
                value = f.name
        elif f.default is not MISSING:
            value = default
        elif f.default_factory is not MISSING:
            value = f"{default}()"
        else:
            continue  # no value: the attribute is left unset, as dataclass does
        if frozen:
            body.append(f"__object_setattr(self, {f.name!r}, {value})")
        else:
            body.append(f"self.{f.name} = {value}")
    ns["__object_setattr"] = object.__setattr__
    source = f"def __init__({', '.join(params)}):\n" + "".join(
        f"    {line}\n" for line in body or ["pass"]
    )
    exec(source, ns)
    init = ns["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    return init


#: the records' reprs running, as ``reprlib.recursive_repr`` keeps them for
#: ``dataclass``: an object's repr inside itself is "...". One set for all
#: records (a key is the object and the thread, whatever its class), not a
#: wrapper and a set per class (some 1 KiB of each, issue 25)
_repr_running: set[tuple[int, int]] = set()


def _make_repr(shown: tuple[str, ...]) -> Callable[[Any], str]:
    def __repr__(self: Any) -> str:
        key = id(self), get_ident()
        if key in _repr_running:
            return "..."
        _repr_running.add(key)
        try:
            inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in shown)
            return f"{self.__class__.__qualname__}({inner})"
        finally:
            _repr_running.discard(key)

    return __repr__


def _make_eq(compared: tuple[str, ...]) -> Callable[[Any, object], Any]:
    def __eq__(self: Any, other: object) -> Any:
        if other.__class__ is self.__class__:
            return tuple(getattr(self, n) for n in compared) == tuple(
                getattr(other, n) for n in compared
            )
        return NotImplemented

    return __eq__


def _make_hash(hashed: tuple[str, ...]) -> Callable[[Any], int]:
    def __hash__(self: Any) -> int:
        return hash(tuple(getattr(self, n) for n in hashed))

    return __hash__


def _make_setattr(
    cls: type[Any], names: tuple[str, ...]
) -> Callable[[Any, str, Any], None]:
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    return __setattr__


def _make_delattr(cls: type[Any], names: tuple[str, ...]) -> Callable[[Any, str], None]:
    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __delattr__


def _make_getstate(names: tuple[str, ...]) -> Callable[[Any], list[Any]]:
    def __getstate__(self: Any) -> list[Any]:
        return [getattr(self, n) for n in names]

    return __getstate__


def _make_setstate(names: tuple[str, ...]) -> Callable[[Any, list[Any]], None]:
    def __setstate__(self: Any, state: list[Any]) -> None:
        for name, value in zip(names, state, strict=False):
            object.__setattr__(self, name, value)

    return __setstate__
