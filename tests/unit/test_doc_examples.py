"""tools/doc_examples.py without a server: markers, commands, shapes, rewriting."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "doc_examples", ROOT / "tools" / "doc_examples.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["doc_examples"] = module
    spec.loader.exec_module(module)
    return module


de = _tool()

PAGE = """# A page

<!-- example {"files": {"a.sql": "SELECT 1;\\n"}, "vary": ["^drift"]} -->
```console
$ pgsurge -f a.sql \\
    -T 2
tps = 1746.531008 (without initial connection time)
drift: none
$ echo done
done
```

```console
$ not an example
```
"""


def test_parse_reads_marker_commands_and_outputs(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    [example] = de.parse(page)
    assert example.files == {"a.sql": "SELECT 1;\n"}
    assert [c.text for c in example.commands] == [
        "pgsurge -f a.sql \\\n    -T 2",
        "echo done",
    ]
    assert example.commands[0].output[0].startswith("tps = ")
    assert example.commands[1].output == ["done"]
    assert [v.pattern for v in example.vary] == ["^drift"]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("<!-- example {bad json} -->\n```console\n$ x\n```\n", "bad example options"),
        ("<!-- example {} -->\n```sh\n$ x\n```\n", "must precede"),
        ("<!-- example -->\n```sh\n$ x\n```\n", "must precede a ```console block"),
        ("<!-- example -->\n```console\n$ x\n", "not closed"),
        ("<!-- example -->\n```console\noutput first\n```\n", "must start with a $"),
    ],
)
def test_bad_markers_name_file_and_line(tmp_path: Path, text: str, error: str) -> None:
    page = tmp_path / "bad.md"
    page.write_text(text)
    with pytest.raises(de.ExampleError, match=re.escape(error)) as info:
        de.parse(page)
    assert f"{page}:1:" in str(info.value)


def test_shapes_ignore_numbers_spacing_load_and_varying_lines() -> None:
    want = [
        "tps = 1746.531008 (without initial connection time)",
        "run  1/10  A  tps 2 036  p99 7.88 ms",
        "drift: none in tps",
    ]
    got = [
        "tps = 98.5 (without initial connection time)",
        "run 1/10 A tps 998 p99 12.1 ms",
        "pgsurge: warning: worker 0 was busy 97% of the run: the client may be"
        " the bottleneck (try more -j)",
    ]
    assert de.same_shape(want, got, [re.compile("^drift")]) == []
    # a line that changed its words, or went missing, is a difference
    assert de.same_shape(want, got[:1], [re.compile("^drift")])
    changed = ["tps = 98.5 (including connections establishing)", *got[1:]]
    assert de.same_shape(want, changed, [re.compile("^drift")])


def test_rewrite_replaces_only_the_outputs(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    [example] = de.parse(page)
    de.rewrite(example, [["tps = 1.0 (without initial connection time)"], ["done"]])
    text = page.read_text()
    assert "drift: none" not in text and "tps = 1.0 (" in text
    assert "$ pgsurge -f a.sql \\\n    -T 2\n" in text
    assert text.count("```") == PAGE.count("```")
    [again] = de.parse(page)
    assert [c.output for c in again.commands] == [
        ["tps = 1.0 (without initial connection time)"],
        ["done"],
    ]


def test_the_guide_parses() -> None:
    found = list(de.examples(de.default_files()))
    assert len(found) >= 4  # getting started (2), insight (2), experiments (1)
    # a command may be silent (a loop storing runs), the last one never is
    assert all(e.commands and e.commands[-1].output for e in found)
