"""The data the HTML report's charts are drawn from (``report.html_charts``)
and what the page embeds of them: a comparison side's percentile curve is
monotone and has no holes, the wait shares are stacked from 0 in colours of
their own, the dot plot's axis has round ticks and says where it starts.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from typing import Any

from pgsurge.report.html import DATA_ELEMENT_ID, RunDoc, render_html
from pgsurge.report.html_charts import (
    OTHER_COLOR,
    WAIT_COLORS,
    merged_curve,
    wait_stack,
)
from pgsurge.report.html_compare import dot_plot_svg
from pgsurge.stats.histogram import Histogram
from tests.fix_data import result_doc


def _hist_doc(values: list[int]) -> dict[str, Any]:
    hist = Histogram()
    for v in values:
        hist.record(v)
    doc = result_doc()
    doc["histograms"] = {"latency": hist.to_dict()}
    return doc


def _embedded(page: str) -> dict[str, Any]:
    m = re.search(
        rf'<script type="application/json" id="{DATA_ELEMENT_ID}">(.*?)</script>',
        page,
        re.S,
    )
    assert m is not None
    data: dict[str, Any] = json.loads(m.group(1))
    return data


def _runs_of_two_shapes() -> tuple[dict[str, Any], dict[str, Any]]:
    # one run of many fast transactions, one of few slow ones: the median
    # of their two curves, nine by nine, went down where the short curve
    # ended (its maximum) and had no value beyond it
    rng = random.Random(7)
    fast = _hist_doc([rng.randint(100, 2000) for _ in range(50_000)])
    slow = _hist_doc([rng.randint(5_000, 90_000) for _ in range(300)])
    return fast, slow


def test_a_sides_curve_is_its_merged_histograms_monotone_and_whole() -> None:
    fast, slow = _runs_of_two_shapes()
    curve = merged_curve([fast, slow])
    assert curve is not None
    xs, ms = curve["x"], curve["ms"]
    assert all(v is not None and math.isfinite(v) for v in ms)
    assert all(b > a for a, b in itertools.pairwise(xs)), "x increases"
    assert all(b >= a for a, b in itertools.pairwise(ms)), "never goes down"
    # up to the rank of the side's slowest transaction, ending at its maximum
    assert xs[-1] == round(math.log10(50_300), 6)
    assert ms[-1] == 90_000 / 1000.0 or ms[-1] >= 89.0
    # grid steps of 0.05 nines, no hole
    assert all(abs((b - a) - 0.05) < 1e-6 for a, b in itertools.pairwise(xs[:-1]))


def test_comparison_page_embeds_one_curve_per_side() -> None:
    fast, slow = _runs_of_two_shapes()
    runs = [RunDoc("a1.json", fast, "A"), RunDoc("a2.json", slow, "A")]
    runs += [RunDoc("b1.json", fast, "B"), RunDoc("b2.json", fast, "B")]
    data = _embedded(render_html(runs))
    assert set(data["side_curves"]) == {"A", "B"}
    for curve in data["side_curves"].values():
        assert curve["ms"] == sorted(curve["ms"])
        assert None not in curve["ms"]
    assert data["side_curves"]["A"] == merged_curve([fast, slow])
    # a single run has no side curve: its own curve is drawn
    assert _embedded(render_html([RunDoc("a.json", fast)]))["side_curves"] == {}


def test_no_side_curve_without_histograms() -> None:
    doc = result_doc()
    doc["histograms"] = None
    assert merged_curve([doc, doc]) is None


def _waits_doc(shares: list[dict[str, float] | None]) -> dict[str, Any]:
    doc = result_doc()
    template = doc["intervals"][0]
    doc["intervals"] = []
    for i, w in enumerate(shares):
        iv = dict(template, offset_s=float(i), duration_s=1.0)
        if w is not None:
            iv["waits"] = w
        doc["intervals"].append(iv)
    return doc


def test_wait_shares_are_stacked_from_zero() -> None:
    shares: list[dict[str, float] | None] = [
        {"CPU": 0.5, "IO:DataFileRead": 0.2, "LWLock:WALInsert": 0.1},
        {"CPU": 0.4, "IO:DataFileRead": 0.3},
        None,  # an interval without samples
        {"CPU": 0.6, "Lock:tuple": 0.05},
    ]
    stack = wait_stack(_waits_doc(shares))
    assert stack is not None
    assert stack["x"] == [0.0, 1.0, 2.0, 3.0]
    assert stack["names"][0] == "CPU"  # the largest first, at the bottom
    assert stack["lo"][0] == [0.0, 0.0, None, 0.0]
    for below, above in zip(stack["hi"], stack["lo"][1:], strict=False):
        assert below == above  # each band starts where the one below ends
    for i, name in enumerate(stack["names"]):
        for j, w in enumerate(shares):
            if w is None:
                assert stack["hi"][i][j] is None
            else:
                band = stack["hi"][i][j] - stack["lo"][i][j]
                assert math.isclose(band, w.get(name, 0.0))
    assert math.isclose(stack["hi"][-1][0], 0.8)
    assert stack["ymax"] == 1.0


def test_wait_colours_are_distinct_and_other_is_grey() -> None:
    names = [f"LWLock:e{i}" for i in range(12)]
    shares = [{n: 0.01 * (i + 1) for i, n in enumerate(names)}] * 3
    stack = wait_stack(_waits_doc(list(shares)))
    assert stack is not None
    assert stack["names"][-1] == "other"
    assert stack["colors"][-1] == OTHER_COLOR
    assert len(set(stack["colors"])) == len(stack["colors"])
    assert OTHER_COLOR not in WAIT_COLORS
    # the events of "other" are summed into its band
    band = stack["hi"][-1][0] - stack["lo"][-1][0]
    assert math.isclose(band, sum(0.01 * (i + 1) for i in range(4)))


def test_no_wait_stack_without_waits() -> None:
    assert wait_stack(_waits_doc([None, None])) is None
    assert wait_stack(result_doc()) is None


def test_page_has_a_wait_chart_only_with_a_stack() -> None:
    doc = _waits_doc([{"CPU": 0.5}, {"CPU": 0.7}])
    data = _embedded(render_html([RunDoc("w.json", doc)]))
    assert data["wait_stack"] == wait_stack(doc)
    assert 'data-chart="waits"' in render_html([RunDoc("w.json", doc)])
    plain = render_html([RunDoc("p.json", result_doc())])
    assert 'data-chart="waits"' not in plain


def _ticks(svg: str) -> list[float]:
    labels = re.findall(r'text-anchor="end">([^<]*)<', svg)
    return [float(v.replace(",", "")) for v in labels]


def test_dot_plot_ticks_are_round_and_a_cut_axis_says_so() -> None:
    svg = dot_plot_svg([1003.2, 1011.7, 1020.4], [1101.9, 1104.0, 1112.8])
    ticks = _ticks(svg)
    step = ticks[1] - ticks[0]
    assert step in (10, 20, 25, 50, 100)
    assert all(math.isclose(b - a, step) for a, b in itertools.pairwise(ticks))
    assert all(t % step == 0 for t in ticks)
    assert ticks[0] > 0
    assert f"axis starts at {ticks[0]:,.0f}, not 0" in svg
    # figures near 0: the axis starts at 0 and says nothing
    svg = dot_plot_svg([3.0, 4.0], [5.0, 6.0])
    assert _ticks(svg)[0] == 0 and "not 0" not in svg
