"""The grid of a sweep: ``--vary`` specs, the cells they span, the run order.

A ``--vary`` spec is one of three forms (the first word says which):

* ``"-c 1,2,4,8"`` (or ``"--rate 100,200"``, ``"-M simple,prepared"``): a
  pgsurge option and its values; each cell's runs get ``OPTION VALUE``;
  ``-s``/``--scale`` is special: the database is re-initialized (``-i -s
  VALUE``) once per value, and the runs get no ``-s``;
* ``"SET work_mem 4MB,64MB"``: a server setting for the session, sent as
  ``-c work_mem=4MB`` in ``PGOPTIONS`` (after any ``PGOPTIONS`` the arm
  has);
* ``"NAME v1,v2"`` with an environment variable's name (upper case, e.g.
  ``PGOPTIONS``): the variable set to each value.

Values are separated by commas. The cells are the cartesian product of
the specs, the first spec varying slowest (it is the table's first
column). ``rounds`` lays out the counted runs: round r runs every
(cell, arm) pair once, the pairs rotated by r positions so that each cell
meets the machine's drift at a different point of each round, and with
two arms A and B swap places every other round (ABBA). A varied scale
cannot interleave (each switch would re-initialize): the scale is then
the outer loop and the rounds interleave the cells of one scale.
"""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pgsurge.errors import UsageError
from pgsurge.redact import MASK, is_secret_name, redact_text

__all__ = ["SCALE_OPTIONS", "Cell", "Vary", "cells", "parse_vary", "rounds"]

#: options that vary the data set rather than a run
SCALE_OPTIONS = ("-s", "--scale")
#: options a sweep cannot vary: it sets them itself, or they end the run early
_REFUSED = ("--json", "-i", "--initialize", "--html", "--help", "--version")
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*\Z")
_SETTING = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")


@dataclass(frozen=True, slots=True)
class Vary:
    """One ``--vary`` spec."""

    #: "option", "scale", "setting" or "env"
    kind: str
    #: the option (``-c``), the setting (``work_mem``) or the variable
    name: str
    values: tuple[str, ...]

    @property
    def label(self) -> str:
        """The column heading: the option, ``SET name``, or the variable."""
        return f"SET {self.name}" if self.kind == "setting" else self.name

    @property
    def shown(self) -> tuple[str, ...]:
        """The values as printed and written (table, manifest, JSON, HTML):
        a password masked — every value of a secret variable such as
        ``PGPASSWORD``, a URI's or conninfo's in ``-d`` — and numbered when
        masking made two of them alike, so the cells stay apart."""
        if self.kind == "env" and is_secret_name(self.name):
            masked = [MASK for _ in self.values]
        else:
            masked = [redact_text(v) for v in self.values]
        if len(set(masked)) == len(masked):
            return tuple(masked)
        return tuple(
            f"{m} #{i}" if m != v else v
            for i, (m, v) in enumerate(zip(masked, self.values, strict=True), 1)
        )

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "name": self.name, "values": list(self.shown)}

    @property
    def numeric(self) -> bool:
        """Every value is a number (the HTML draws it on a numeric axis)."""
        try:
            [float(v) for v in self.values]
        except ValueError:
            return False
        return True


def parse_vary(spec: str) -> Vary:
    """A ``--vary`` spec; a ``UsageError`` says what is wrong with it."""
    words = spec.strip().split(None, 1)
    if len(words) < 2:
        raise UsageError(f'--vary: expected "OPTION v1,v2,…", got "{spec}"')
    head, rest = words
    kind = "option"
    if head == "SET":
        parts = rest.split(None, 1)
        if len(parts) < 2 or not _SETTING.match(parts[0]):
            raise UsageError(f'--vary: expected "SET name v1,v2,…", got "{spec}"')
        kind, head, rest = "setting", parts[0], parts[1]
    elif _ENV_NAME.match(head):
        kind = "env"
    elif not head.startswith("-") or head == "-" or head == "--":
        raise UsageError(
            f'--vary: "{head}" is neither an option (-c, --rate), "SET name" '
            f'nor an environment variable (PGOPTIONS) in "{spec}"'
        )
    elif head in _REFUSED or head.split("=")[0] in _REFUSED:
        raise UsageError(f"--vary: a sweep cannot vary {head}")
    elif head in SCALE_OPTIONS:
        kind = "scale"
    values = tuple(v.strip() for v in rest.split(","))
    if any(not v for v in values):
        raise UsageError(f'--vary: an empty value in "{spec}"')
    if len(set(values)) != len(values) or len(set(_numbers(values))) != len(values):
        raise UsageError(f'--vary: a value given twice in "{spec}"')
    if kind == "scale" and not all(v.isdigit() and int(v) > 0 for v in values):
        raise UsageError(f'--vary: scales must be positive integers in "{spec}"')
    return Vary(kind, head, values)


def _numbers(values: Sequence[str]) -> Sequence[object]:
    """The values as numbers when all are (``-c 1,01`` is one client count
    twice: two cells of the same runs, and a knee found between them)."""
    try:
        return [float(v) for v in values]
    except ValueError:
        return values


@dataclass(frozen=True, slots=True)
class Cell:
    """One grid point: its index, its values (one per spec) and what they
    make of a run's arguments and environment."""

    index: int
    #: as shown: a password masked (``Vary.shown``)
    values: tuple[str, ...]
    args: tuple[str, ...]
    env: Mapping[str, str]
    #: the scale to initialize before its runs (a varied -s), else None
    scale: int | None

    def key(self, specs: Sequence[Vary]) -> str:
        """``-c 4, SET work_mem 64MB`` (for messages and the manifest)."""
        return ", ".join(
            f"{v.label} {x}" for v, x in zip(specs, self.values, strict=True)
        )

    def run_env(self, arm_env: Mapping[str, str]) -> dict[str, str]:
        """The arm's environment with the cell's on top; a cell's server
        settings go after the arm's own ``PGOPTIONS``."""
        env = dict(arm_env)
        for name, value in self.env.items():
            if name == "PGOPTIONS" and env.get(name) and value.startswith("-c "):
                env[name] = f"{env[name]} {value}"
            else:
                env[name] = value
        return env


def _cell(
    index: int, specs: Sequence[Vary], values: Sequence[str], shown: Sequence[str]
) -> Cell:
    args: list[str] = []
    env: dict[str, str] = {}
    settings: list[str] = []
    scale = None
    for spec, value in zip(specs, values, strict=True):
        if spec.kind == "option":
            args += (
                [f"{spec.name}={value}"]
                if spec.name.startswith("--")
                else [
                    spec.name,
                    value,
                ]
            )
        elif spec.kind == "scale":
            scale = int(value)
        elif spec.kind == "setting":
            settings.append(shlex.join(["-c", f"{spec.name}={value}"]))
        else:
            env[spec.name] = value
    if settings:
        own = env.get("PGOPTIONS")
        env["PGOPTIONS"] = " ".join(([own] if own else []) + settings)
    return Cell(index, tuple(shown), tuple(args), env, scale)


def cells(specs: Sequence[Vary]) -> list[Cell]:
    """The cartesian product of the specs, the first varying slowest."""
    names = [s.name for s in specs if s.kind != "scale"]
    if len(set(names)) != len(names) or sum(s.kind == "scale" for s in specs) > 1:
        raise UsageError("--vary: the same option is varied twice")
    # a varied scale is the outer loop (see the module docstring)
    order = sorted(range(len(specs)), key=lambda i: specs[i].kind != "scale")
    if order != list(range(len(specs))):
        raise UsageError("--vary: give the -s spec first (a scale is the outer loop)")
    # the cells carry the values as shown (a password masked), their
    # arguments and environment the real ones
    product = itertools.product(*(zip(s.values, s.shown, strict=True) for s in specs))
    return [
        _cell(i, specs, [v for v, _ in pairs], [w for _, w in pairs])
        for i, pairs in enumerate(product)
    ]


def rounds(grid: Sequence[Cell], n_arms: int, runs: int) -> list[tuple[int, int, int]]:
    """The counted runs in order, as (round, cell index, arm index).

    Rounds are laid out per scale group (cells of one scale are
    consecutive in ``grid``); within a group, round r rotates the cells by
    r, and with two arms, every other round runs B before A.
    """
    groups: list[list[Cell]] = []
    for cell in grid:
        if groups and groups[-1][0].scale == cell.scale:
            groups[-1].append(cell)
        else:
            groups.append([cell])
    out: list[tuple[int, int, int]] = []
    for group in groups:
        for r in range(runs):
            shift = r % len(group)
            rotated = group[shift:] + group[:shift]
            arms = list(range(n_arms))
            if n_arms == 2 and r % 2:
                arms.reverse()
            out.extend((r, cell.index, a) for cell in rotated for a in arms)
    return out
