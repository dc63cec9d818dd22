"""Masking passwords in anything pgsurge prints or writes to a file.

A benchmark's artefacts (``ab``'s header and manifest, comparison files,
run JSON, HTML pages) are pasted into mails and tickets, so every form in
which a password can reach pgsurge is masked before it is shown:

* a URI's user information, ``postgresql://user:PW@host`` (the password
  may hold ``@`` and ``:`` when a hostile or careless user did not
  percent-encode them: everything up to the last ``@`` of the word goes);
* a URI's query parameter, ``?password=PW`` or ``&sslpassword=PW``, its
  name percent-encoded or not (libpq decodes both);
* a conninfo keyword, ``password=PW``, ``password = 'a b'`` (quoted values
  with backslash escapes, as libpq reads them);
* an environment assignment, ``PGPASSWORD=PW`` (any name with PASS, SECRET
  or TOKEN in it, but not ``PGPASSFILE``/``passfile``, which name a file);
* SQL's string after such a word, ``ALTER ROLE r PASSWORD 'PW'``,
  ``OPTIONS (password 'PW')``: ``pg_stat_statements`` keeps a utility
  statement's text with its literals, so another session's password
  change during a run is among ``--server-stats``' top statements.

Masking errs on the side of hiding: a value that merely looks like a
password is masked too. ``redact_text`` works on free text,
``redact_words`` on argument lists (an environment assignment as one word
loses its whole value, spaces included), ``redact_env`` on a mapping of
variables and ``redact_value`` on a JSON-like tree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote

__all__ = [
    "MASK",
    "is_secret_name",
    "printable",
    "redact_echo",
    "redact_env",
    "redact_text",
    "redact_value",
    "redact_words",
]

MASK = "********"

#: a name whose value is a secret (``PASSFILE`` names a file, not a secret)
_SECRET_NAME = re.compile(r"pass(?!file)|secret|token", re.IGNORECASE)

# scheme://user:PW@ — greedy up to the word's last "@"
_URI_USERINFO = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^\s:/?#@]*:)\S*(?=@)", re.I)
# ?name=value / &name=value in a URI's query
_URI_PARAM = re.compile(r"([?&])([^=&\s#]*)=([^&\s#]*)")
# name = value, the value quoted ('…' or "…", backslash escapes) or a word
_ASSIGN = re.compile(
    r"(?<![\w?&%])([A-Za-z_]\w*)(\s*=\s*)('(?:[^'\\]|\\.)*'?|\"(?:[^\"\\]|\\.)*\"?|\S*)",
    re.S,
)
# SQL: a secret word, then a string constant ('…' with '' inside, E'…' with
# backslash escapes too, $tag$…$tag$), possibly cut short (a truncated text)
_SQL_STRING = re.compile(
    r"(\b[A-Za-z_]\w*\s+)"
    r"([Ee]'(?:[^'\\]|''|\\.)*'?|'(?:[^']|'')*'?|(\$\w*\$)(?:.*?\3|.*))",
    re.S,
)
# in a conninfo word: a (masked) value, then words that are no key=value
_CONNINFO_TAIL = re.compile(
    r"(?<![\w?&%])([A-Za-z_]\w*)(\s*=\s*)(\S*(?:\s+[^\s=]+(?=\s|$))+)"
)
# one argument word that is NAME=VALUE, possibly as an option's value
_WORD_ASSIGN = re.compile(r"((?:--?[\w-]+=)?([A-Za-z_]\w*)\s*=).*", re.S)


def is_secret_name(name: str) -> bool:
    """Whether a variable or keyword named ``name`` holds a secret."""
    return _SECRET_NAME.search(name) is not None


def _param(m: re.Match[str]) -> str:
    if is_secret_name(unquote(m.group(2))):
        return f"{m.group(1)}{m.group(2)}={MASK}"
    return m.group(0)


def _assign(m: re.Match[str]) -> str:
    if is_secret_name(m.group(1)):
        return f"{m.group(1)}{m.group(2)}{MASK}"
    return m.group(0)


def _sql_string(m: re.Match[str]) -> str:
    if is_secret_name(m.group(1)):
        return f"{m.group(1)}'{MASK}'"
    return m.group(0)


def redact_text(text: str) -> str:
    """``text`` with every password form masked (see the module doc)."""
    if not _SECRET_NAME.search(text) and "://" not in text:
        return text  # the common case: nothing that could be one
    text = _URI_USERINFO.sub(rf"\1{MASK}", text)
    text = _URI_PARAM.sub(_param, text)
    text = _ASSIGN.sub(_assign, text)
    return _SQL_STRING.sub(_sql_string, text)


def redact_words(words: Iterable[str]) -> list[str]:
    """Each argument word masked; a word ``[--opt=]NAME=VALUE`` with a
    secret NAME loses all of VALUE (a shell word may hold spaces). In a
    conninfo word, an unquoted secret value takes the words after it that
    are no ``key=value`` along: ``password=my secret`` (libpq reads
    ``secret`` as a keyword without its ``=``, and it is half the
    password)."""
    out = []
    for word in words:
        m = _WORD_ASSIGN.fullmatch(word)
        if m is not None and is_secret_name(m.group(2)):
            out.append(m.group(1) + MASK)
        else:
            out.append(_CONNINFO_TAIL.sub(_assign, redact_text(word)))
    return out


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables, a secret one's value masked whole, the others' values
    as ``redact_text`` leaves them (``PGOPTIONS`` may hold anything)."""
    return {k: MASK if is_secret_name(k) else redact_text(v) for k, v in env.items()}


def redact_value(value: Any) -> Any:
    """A copy of a JSON-like tree with every string masked (keys that name
    a secret lose their value whole)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {
            k: MASK
            if isinstance(k, str) and is_secret_name(k) and isinstance(v, str)
            else redact_value(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact_value(v) for v in value]
    return value


# a URI's user information, "user:PW" up to the last "@" before the path
_URI_AUTHORITY = re.compile(r"[a-z][a-z0-9+.-]*://([^/?#]*)@", re.I)
_SECRET_KEY = re.compile(r"(?<![\w%])([A-Za-z_]\w*)\s*=", re.S)
_QUOTED = re.compile(r'"([^"]*)"')


def _secret_spans(sources: Iterable[str]) -> list[str]:
    """The parts of conninfo strings or URIs that may hold a password: a
    URI's user information after the ``:``, and everything from the first
    secret keyword (``password=``, ``?password=``) on: a value the parser
    could not read (``password=my secret``) has no known end."""
    spans = []
    for source in sources:
        m = _URI_AUTHORITY.search(source)
        if m is not None and ":" in m.group(1):
            spans.append(m.group(1).split(":", 1)[1])
        for key in _SECRET_KEY.finditer(source):
            if is_secret_name(unquote(key.group(1))):
                spans.append(source[key.end() :])
                break
    return spans


def redact_echo(message: str, source: str | Iterable[str]) -> str:
    """libpq's message about ``source``, a conninfo string or URI it could
    not parse (``invalid percent-encoded token: "…"``, ``missing "=" after
    "…"``): a quoted token taken from the password is masked, as every
    password form in the rest of the message (``redact_text``). The
    token may be half a password: ``password=my secret`` is read as the
    keyword ``secret`` missing its ``=``."""
    spans = _secret_spans([source] if isinstance(source, str) else source)

    def token(m: re.Match[str]) -> str:
        if m.group(1) and any(m.group(1) in span for span in spans):
            return f'"{MASK}"'
        return m.group(0)

    return redact_text(_QUOTED.sub(token, message)) if spans else redact_text(message)


# C0 controls but tab and newline, DEL, C1 controls (a terminal acts on them)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` for a terminal: a control character shown as ``\\xNN``.

    Not a secret, but the same rule of what may reach the screen: what a
    results store or a result file holds (labels, the environment) is
    whatever its writer put there, a team's shared store included, and an
    escape sequence printed as it is clears the screen, retitles the
    window or worse (OSC 52 writes the clipboard)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text)
