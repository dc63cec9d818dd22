"""A small ``getopt_long`` that behaves like GNU libc's, as pgbench sees it.

pgbench leaves its command line to glibc's ``getopt_long``, so users rely on
its exact behaviour: short options cluster (``-nS``) and take their value
attached or from the next word (``-c8``, ``-c 8``), long options take
``--name=value`` or ``--name value`` and may be shortened to any unique
prefix, options and operands may be mixed (operands are collected in order,
unless ``POSIXLY_CORRECT`` is set, which stops at the first operand), and
``--`` ends the options. Its diagnostics are printed without pgbench's
``error:`` level, e.g. ``pgsurge: unrecognized option '--foo'``.

argparse cannot reproduce this (it has its own abbreviation rules, ``-?``,
messages and exit status), hence this module. It only splits words: the
meaning of each option is ``options``' business.

One pgsurge rule on top of glibc's: options marked ``extension`` (ours, not
pgbench 18.6's) are considered for an abbreviation only when no pgbench
option matches it, so every pgbench 18.6 command line keeps its meaning
(``--con`` is still ``--connect``, never ambiguous with
``--continue-on-error``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from pgsurge.errors import PROG, UsageError
from pgsurge.records import record


@record(frozen=True, slots=True)
class LongOption:
    """One entry of the long option table, in pgbench's table order."""

    name: str
    has_arg: bool
    #: what the option is reported as: its short letter, or its long name
    key: str
    #: a pgsurge option that pgbench 18.6 does not have
    extension: bool = False


class GetoptError(UsageError):
    """A complaint of getopt itself: printed without the ``error:`` level.

    pgbench follows it with its usual hint, so the whole text is::

        pgsurge: invalid option -- 'Z'
        pgsurge: hint: Try "pgsurge --help" for more information.
    """

    def __init__(self, complaint: str) -> None:
        super().__init__(complaint, hint=f'Try "{PROG} --help" for more information.')

    def format(self) -> str:
        return f"{PROG}: {self.message}\n{PROG}: hint: {self.hint}\n"


def parse_shortopts(spec: str) -> dict[str, bool]:
    """``"b:c:C"`` → ``{"b": True, "c": True, "C": False}`` (True: takes a value)."""
    table: dict[str, bool] = {}
    i = 0
    while i < len(spec):
        letter = spec[i]
        takes = i + 1 < len(spec) and spec[i + 1] == ":"
        table[letter] = takes
        i += 2 if takes else 1
    return table


class Getopt:
    """Iterate over ``(key, value)`` pairs; operands end up in ``operands``.

    ``value`` is None for options without an argument. Iteration raises
    :class:`GetoptError` at the first bad word, exactly where glibc's
    getopt_long would return ``'?'``: options before it have already been
    yielded (pgbench acts on each option as it comes).
    """

    def __init__(
        self,
        args: Sequence[str],
        shortopts: str,
        longopts: Sequence[LongOption],
        *,
        posixly_correct: bool = False,
    ) -> None:
        self._args = list(args)
        self._short = parse_shortopts(shortopts)
        self._long = tuple(longopts)
        self._posix = posixly_correct
        #: non-option words, in command-line order (argv[optind:] after permutation)
        self.operands: list[str] = []

    def __iter__(self) -> Iterator[tuple[str, str | None]]:
        args = self._args
        i = 0
        while i < len(args):
            word = args[i]
            i += 1
            if word == "--":
                self.operands.extend(args[i:])
                return
            if not word.startswith("-") or word == "-":
                if self._posix:
                    self.operands.append(word)
                    self.operands.extend(args[i:])
                    return
                self.operands.append(word)
                continue
            if word.startswith("--"):
                key, value, i = self._long_option(word[2:], args, i)
                yield key, value
                continue
            # a cluster of short options: -nS, -c8, -nc 8
            pos = 1
            while pos < len(word):
                letter = word[pos]
                pos += 1
                takes = self._short.get(letter)
                if takes is None or letter == ":":
                    raise GetoptError(f"invalid option -- '{letter}'")
                if not takes:
                    yield letter, None
                    continue
                if pos < len(word):
                    yield letter, word[pos:]
                elif i < len(args):
                    i += 1
                    yield letter, args[i - 1]
                else:
                    raise GetoptError(f"option requires an argument -- '{letter}'")
                break

    def _long_option(
        self, body: str, args: list[str], i: int
    ) -> tuple[str, str | None, int]:
        name, eq, attached = body.partition("=")
        option = self._find_long(name, body)
        if eq:
            if not option.has_arg:
                raise GetoptError(f"option '--{option.name}' doesn't allow an argument")
            return option.key, attached, i
        if not option.has_arg:
            return option.key, None, i
        if i < len(args):
            return option.key, args[i], i + 1
        raise GetoptError(f"option '--{option.name}' requires an argument")

    def _find_long(self, name: str, body: str) -> LongOption:
        for option in self._long:
            if option.name == name:
                return option
        # glibc: a unique prefix is accepted; several are ambiguous (our
        # options all have distinct meanings, so no "same option" exception)
        for extension in (False, True):
            candidates = [
                o
                for o in self._long
                if o.extension is extension and o.name.startswith(name)
            ]
            if len(candidates) == 1:
                return candidates[0]
            if candidates:
                names = " ".join(f"'--{o.name}'" for o in candidates)
                raise GetoptError(
                    f"option '--{body}' is ambiguous; possibilities: {names}"
                )
        raise GetoptError(f"unrecognized option '--{body}'")
