"""Console examples in README.md and docs/ that are produced by running them.

An example is a ``console`` block right after a marker comment::

    <!-- example -->
    ```console
    $ pgsurge -c 2 -j 2 -T 2
    (the output, as it came)
    ```

Every ``$ `` line is a command (a line ending in a backslash goes on), and
the lines after it up to the next command are its output: stdout and stderr
together, as a terminal shows them. The marker may carry JSON options::

    <!-- example {"files": {"lock.sql": "BEGIN; ... COMMIT;\\n"},
                  "fresh": true, "vary": ["^drift:"]} -->

* ``files``: written into the (temporary) working directory first;
* ``fresh``: run on a new embedded server (the quick start's first run),
  not on the shared one whose pgbench tables are ready at scale 1;
* ``vary``: regexes of lines whose presence or words depend on the run (a
  verdict, the order of wait events, a note that only some runs give):
  such lines are left out of the comparison on both sides.

``--update`` runs every example and writes its output into the file, the
numbers as they came; ``--check`` (the default) runs them and fails when an
output no longer has the same shape: the same lines once numbers are masked
(``N``) and spaces squeezed, the lines about the client being busy (they
depend on the machine's load) left out on both sides. The data location
pgsurge prints is shown as a normal user's, ``~/.local/share/pgsurge/pg18``.

    python tools/doc_examples.py [--update] [--only SUBSTRING] [FILE ...]
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- example(?:\s+(?P<opts>\{.*\}))?\s*-->\s*$")
#: what a user sees for the data location (the examples run elsewhere)
SHOWN_DATA_DIR = "~/.local/share/pgsurge/pg18"
#: lines that depend on the machine's load, never on the docs being true
LOAD_LINES = re.compile(r"workers? (?:were|was) busy|the client may be the bottleneck")
NUMBER = re.compile(r"[-+]?\d+(?:[ ,.]\d+)*")
TIMEOUT_S = 600


@dataclass
class Command:
    """One ``$`` line of an example and the output shown after it."""

    text: str
    output: list[str] = field(default_factory=list)


@dataclass
class Example:
    """A marked console block: where it is, its options and commands."""

    path: Path
    line: int  # 1-based line of the ```console fence
    end: int  # 0-based index of the closing fence
    files: dict[str, str]
    fresh: bool
    vary: list[re.Pattern[str]]
    commands: list[Command]

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


class ExampleError(Exception):
    """A marker or block that cannot be read (file:line in the message)."""


def default_files() -> list[Path]:
    """README.md and every page of the guide."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def parse(path: Path) -> list[Example]:
    """The marked examples of one Markdown file, in order."""
    lines = path.read_text().splitlines()
    found: list[Example] = []
    for i, text in enumerate(lines):
        m = MARKER.match(text)
        if m is None:
            continue
        where = f"{path}:{i + 1}"
        try:
            opts = json.loads(m["opts"]) if m["opts"] and m["opts"].strip() else {}
        except json.JSONDecodeError as exc:
            raise ExampleError(f"{where}: bad example options: {exc}") from None
        if i + 1 >= len(lines) or lines[i + 1].strip() != "```console":
            raise ExampleError(f"{where}: the marker must precede a ```console block")
        end = next((j for j in range(i + 2, len(lines)) if lines[j] == "```"), None)
        if end is None:
            raise ExampleError(f"{where}: the console block is not closed")
        commands = _commands(lines[i + 2 : end], where)
        found.append(
            Example(
                path=path,
                line=i + 2,
                end=end,
                files=dict(opts.get("files", {})),
                fresh=bool(opts.get("fresh", False)),
                vary=[re.compile(v) for v in opts.get("vary", [])],
                commands=commands,
            )
        )
    return found


def _commands(block: list[str], where: str) -> list[Command]:
    commands: list[Command] = []
    pending: list[str] = []
    for text in block:
        if pending:
            pending.append(text)
            if not text.endswith("\\"):
                commands.append(Command("\n".join(pending)))
                pending = []
        elif text.startswith("$ "):
            if text.endswith("\\"):
                pending = [text[2:]]
            else:
                commands.append(Command(text[2:]))
        elif not commands:
            raise ExampleError(f"{where}: the block must start with a $ command")
        else:
            commands[-1].output.append(text)
    if pending:
        raise ExampleError(f"{where}: the last command goes on past the block")
    return commands


def shape(line: str) -> str:
    """A line with its numbers masked and its spaces squeezed."""
    return " ".join(NUMBER.sub("N", line).split())


def same_shape(
    want: Sequence[str], got: Sequence[str], vary: Sequence[re.Pattern[str]] = ()
) -> list[str]:
    """The differences between two outputs' shapes ([] when alike)."""

    def kept(lines: Sequence[str]) -> list[str]:
        return [
            shape(x)
            for x in lines
            if not LOAD_LINES.search(x) and not any(v.search(x) for v in vary)
        ]

    a, b = kept(want), kept(got)
    if a == b:
        return []
    return list(difflib.unified_diff(a, b, "documented", "now", lineterm="", n=1))


class Runner:
    """Runs commands against embedded servers in temporary directories."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.top = Path(tempfile.mkdtemp(prefix="pgsurge-doc-examples-"))
        # our own new directory: as root, the embedded server's system user
        # must reach the data locations inside it
        self.top.chmod(0o755)
        self.shared: Path | None = None
        self.servers: list[Path] = []

    def env(self, data_dir: Path) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("PG") or k == "PGSURGE_PURE"
        }
        env["PATH"] = f"{self.bindir}{os.pathsep}{env.get('PATH', '')}"
        env["PGSURGE_DATA_DIR"] = str(data_dir)
        env.setdefault("XDG_RUNTIME_DIR", str(self.top))
        env["COLUMNS"] = "100"
        env["NO_COLOR"] = "1"
        return env

    def data_dir(self, fresh: bool) -> Path:
        if not fresh and self.shared is not None:
            return self.shared
        path = self.top / f"data{len(self.servers)}"
        self.servers.append(path)
        if not fresh:
            self.shared = path
            # the tables ready, so that no example shows the first run's init
            self.sh("pgsurge -i -q", path, self.top)
        return path

    def sh(self, command: str, data_dir: Path, cwd: Path) -> list[str]:
        done = subprocess.run(
            ["bash", "-c", command + " 2>&1"],
            cwd=cwd,
            env=self.env(data_dir),
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
        text = done.stdout.replace(str(data_dir), SHOWN_DATA_DIR)
        return text.rstrip("\n").split("\n") if text.strip() else []

    def run(self, example: Example) -> list[list[str]]:
        """Each command's output, as the example's block would show it."""
        data_dir = self.data_dir(example.fresh)
        cwd = Path(tempfile.mkdtemp(dir=self.top))
        for name, text in example.files.items():
            (cwd / name).write_text(text)
        return [self.sh(c.text, data_dir, cwd) for c in example.commands]

    def close(self) -> None:
        for path in self.servers:
            self.sh("pgsurge server stop >/dev/null", path, self.top)
        shutil.rmtree(self.top, ignore_errors=True)


def examples(paths: Sequence[Path], only: str | None = None) -> Iterator[Example]:
    for path in paths:
        for example in parse(path):
            if only is None or any(only in c.text for c in example.commands):
                yield example


def rewrite(example: Example, outputs: list[list[str]]) -> None:
    """Put the outputs into the example's block in its file."""
    lines = example.path.read_text().splitlines()
    body: list[str] = []
    for command, output in zip(example.commands, outputs, strict=True):
        body.extend(
            "$ " + part if k == 0 else part
            for k, part in enumerate(command.text.split("\n"))
        )
        body.extend(output)
    lines[example.line : example.end] = body
    example.path.write_text("\n".join(lines) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--update", action="store_true", help="rewrite the outputs")
    ap.add_argument("--only", help="only examples whose command contains this")
    ap.add_argument(
        "--bindir",
        type=Path,
        default=Path(sys.executable).parent,
        help="where the pgsurge program is (default: this Python's bin)",
    )
    ns = ap.parse_args(argv)
    paths = [p.resolve() for p in ns.files] or default_files()
    try:
        todo = list(examples(paths, ns.only))
    except ExampleError as exc:
        print(f"doc_examples: {exc}", file=sys.stderr)
        return 1
    runner = Runner(ns.bindir)
    failed = 0
    try:
        # from the bottom up, so that rewriting keeps the lines above right
        for example in sorted(todo, key=lambda e: (str(e.path), -e.line)):
            outputs = runner.run(example)
            if ns.update:
                rewrite(example, outputs)
                print(f"{example.where}: updated", file=sys.stderr)
                continue
            for command, output in zip(example.commands, outputs, strict=True):
                diff = same_shape(command.output, output, example.vary)
                if diff:
                    failed += 1
                    print(f"{example.where}: $ {command.text}", file=sys.stderr)
                    print("\n".join(diff), file=sys.stderr)
    finally:
        runner.close()
    if failed:
        print(
            f"doc_examples: {failed} example output(s) changed shape", file=sys.stderr
        )
        return 1
    print(f"doc_examples: {len(todo)} example(s) checked", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
