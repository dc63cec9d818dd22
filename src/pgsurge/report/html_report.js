// pgsurge HTML report: draws the charts of the page from its embedded data.
//
// The data are the JSON text of the element #pgsurge-data (report/html.py):
// {format, runs: [{label, side, doc, curve}], side_curves, wait_stack,
// compare}; side_curves and wait_stack are computed by report/html_charts.py
// (a side's percentile curve from its merged histogram, the wait bands
// already stacked), so that this script only draws. Each chart has a
// placeholder <div class="plot" data-chart="NAME">; a chart whose data are
// absent was not given a placeholder. Tables are static HTML and need no
// script. When every chart is drawn, window.pgsurgeReady is true and
// window.pgsurgeCharts holds their number, window.pgsurgeScales() each
// one's y range (the browser tests read them).
(function () {
  "use strict";

  var data = JSON.parse(document.getElementById("pgsurge-data").textContent);
  var runs = data.runs;
  var many = runs.length > 1;
  var SIDE_COLOR = { A: "31, 111, 235", B: "217, 72, 15" };
  var LINE_COLORS = ["#1f6feb", "#8250df", "#d9480f", "#1a7f37", "#c62828", "#9a6700"];
  var charts = [];

  function rgba(side, alpha) {
    return "rgba(" + (SIDE_COLOR[side] || SIDE_COLOR.A) + ", " + alpha + ")";
  }

  function get(obj, path) {
    for (var i = 0; i < path.length; i++) {
      if (obj === null || obj === undefined) return null;
      obj = obj[path[i]];
    }
    return obj === undefined ? null : obj;
  }

  // a value for a log axis: positive numbers only
  function pos(v) {
    return typeof v === "number" && v > 0 ? v : null;
  }

  function median(values) {
    var v = values.filter(function (x) { return x !== null && x !== undefined; });
    if (!v.length) return null;
    v.sort(function (a, b) { return a - b; });
    var m = Math.floor(v.length / 2);
    return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
  }

  // the interval series of a run, keyed by its start rounded to the step;
  // an interval shorter than half a step (the last few ms of a run) is left
  // out: its rate would be noise
  function intervalSeries(run) {
    var step = get(run.doc, ["config", "progress_s"]) || 1;
    var out = {};
    (run.doc.intervals || []).forEach(function (iv) {
      if (!(iv.duration_s >= step / 2)) return;
      out[Math.round(iv.offset_s / step) * step] = iv;
    });
    return out;
  }

  // one x array (sorted union of keys) and, per run, its values along it
  function align(perRun) {
    var keys = {};
    perRun.forEach(function (m) {
      Object.keys(m).forEach(function (k) { keys[k] = true; });
    });
    var xs = Object.keys(keys).map(Number).sort(function (a, b) { return a - b; });
    return {
      x: xs,
      ys: perRun.map(function (m) {
        return xs.map(function (x) { return x in m ? m[x] : null; });
      }),
    };
  }

  function width(el) {
    return Math.max(320, Math.min(el.clientWidth || 900, 1150));
  }

  function makeChart(el, opts, aligned) {
    opts.width = width(el);
    opts.height = opts.height || 300;
    var chart = new uPlot(opts, aligned, el);
    charts.push({ chart: chart, el: el });
    return chart;
  }

  var LOG_Y = { distr: 3, log: 10 };

  // a linear axis from 0 to a little above the data (uPlot's own rounding:
  // the ticks stay round), so that bars of tps are not read as ratios of a
  // cut-off axis
  var FROM_ZERO = {
    range: function (u, lo, hi) {
      return [0, hi > 0 ? uPlot.rangeNum(0, hi, 0.1, true)[1] : 1];
    },
  };

  // whole seconds (intervals are whole seconds long)
  var SECOND_INCRS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200];

  function xAxis(label) {
    return { label: label, stroke: "#5d6675", grid: { stroke: "#eceef2" }, incrs: SECOND_INCRS };
  }

  function yAxis(label, scale, side) {
    var axis = { label: label, stroke: "#5d6675", grid: { stroke: "#eceef2" }, size: 60 };
    if (scale) axis.scale = scale;
    if (side) axis.side = side;
    return axis;
  }

  // faint per-run lines and a bold median per side, for one metric
  function comparisonSeries(pick, unit, logScale) {
    var perRun = runs.map(function (run) {
      var m = intervalSeries(run), out = {};
      Object.keys(m).forEach(function (k) {
        var v = pick(m[k]);
        out[k] = logScale ? pos(v) : v;
      });
      return out;
    });
    var al = align(perRun);
    var series = [{ label: "s" }];
    var cols = [al.x];
    runs.forEach(function (run, i) {
      series.push({
        label: run.side + ": " + run.label,
        stroke: rgba(run.side, 0.3),
        width: 1,
        value: function (u, v) { return v === null ? "–" : v.toFixed(2) + " " + unit; },
      });
      cols.push(al.ys[i]);
    });
    ["A", "B"].forEach(function (side) {
      var idx = [];
      runs.forEach(function (run, i) { if (run.side === side) idx.push(i); });
      if (!idx.length) return;
      series.push({
        label: "median " + side,
        stroke: rgba(side, 1),
        width: 2.5,
        value: function (u, v) { return v === null ? "–" : v.toFixed(2) + " " + unit; },
      });
      cols.push(al.x.map(function (_, j) {
        return median(idx.map(function (i) { return al.ys[i][j]; }));
      }));
    });
    return { series: series, data: cols };
  }

  function drawTps(el) {
    if (many) {
      var s = comparisonSeries(function (iv) { return iv.tps; }, "tps", false);
      makeChart(el, {
        scales: { x: { time: false }, y: FROM_ZERO },
        series: s.series,
        axes: [xAxis("interval start (s)"), yAxis("tps")],
      }, s.data);
      return;
    }
    var m = intervalSeries(runs[0]);
    var al = align([m]);
    var ivs = al.ys[0];
    function rate(key) {
      return ivs.map(function (iv) {
        return iv && iv.duration_s > 0 ? (iv[key] || 0) / iv.duration_s : null;
      });
    }
    var series = [
      { label: "s" },
      { label: "tps", stroke: "#1f6feb", width: 2, fill: "rgba(31, 111, 235, 0.08)" },
      { label: "failed/s", stroke: "#c62828", width: 1.5, scale: "f" },
    ];
    var cols = [al.x, ivs.map(function (iv) { return iv ? iv.tps : null; }), rate("failed")];
    var axes = [xAxis("interval start (s)"), yAxis("tps"), yAxis("failed/s", "f", 1)];
    var retried = rate("retried");
    if (retried.some(function (v) { return v; })) {
      series.push({ label: "retried/s", stroke: "#9a6700", width: 1.5, scale: "f" });
      cols.push(retried);
    }
    makeChart(el, {
      scales: {
        x: { time: false },
        y: FROM_ZERO,
        f: { range: function (u, lo, hi) { return [0, Math.max(1, hi)]; } },
      },
      series: series,
      axes: axes,
    }, cols);
  }

  function drawLatency(el, key, label) {
    if (many) {
      var s = comparisonSeries(function (iv) { return get(iv, [key, "percentiles", "99"]); }, "ms", true);
      makeChart(el, {
        scales: { x: { time: false }, y: LOG_Y },
        series: s.series,
        axes: [xAxis("interval start (s)"), yAxis(label + " p99 (ms)")],
      }, s.data);
      return;
    }
    var al = align([intervalSeries(runs[0])]);
    var ivs = al.ys[0];
    var picks = [
      ["p50", ["percentiles", "50"], "#1a7f37"],
      ["p90", ["percentiles", "90"], "#1f6feb"],
      ["p99", ["percentiles", "99"], "#8250df"],
      ["max", ["max"], "#c62828"],
    ];
    var series = [{ label: "s" }];
    var cols = [al.x];
    picks.forEach(function (p) {
      series.push({
        label: p[0],
        stroke: p[2],
        width: p[0] === "max" ? 1 : 1.5,
        value: function (u, v) { return v === null ? "–" : v.toFixed(3) + " ms"; },
      });
      cols.push(ivs.map(function (iv) { return pos(get(iv ? iv[key] : null, p[1])); }));
    });
    makeChart(el, {
      scales: { x: { time: false }, y: LOG_Y },
      series: series,
      axes: [xAxis("interval start (s)"), yAxis(label + " (ms)")],
    }, cols);
  }

  function ninesLabel(x) {
    if (x <= 0) return "0%";
    var p = 100 * (1 - Math.pow(10, -x));
    var digits = Math.max(0, Math.ceil(x) - 2);
    return p.toFixed(digits) + "%";
  }

  function curvePoints(curve) {
    var out = {};
    if (curve) curve.x.forEach(function (x, i) { out[x] = pos(curve.ms[i]); });
    return out;
  }

  function drawPercentiles(el) {
    // each run's curve, then (comparing) each side's from its merged
    // histogram: one monotone curve per side, not a median of curves
    var sides = many ? ["A", "B"].filter(function (s) { return (data.side_curves || {})[s]; }) : [];
    var perRun = runs.map(function (run) { return curvePoints(run.curve); });
    var al = align(perRun.concat(sides.map(function (s) { return curvePoints(data.side_curves[s]); })));
    var series = [{ label: "percentile", value: function (u, v) { return v === null ? "–" : ninesLabel(v); } }];
    var cols = [al.x];
    var fmtMs = function (u, v) { return v === null ? "–" : v.toFixed(3) + " ms"; };
    runs.forEach(function (run, i) {
      if (!run.curve) return;
      series.push({
        label: many ? run.side + ": " + run.label : "latency",
        stroke: many ? rgba(run.side, 0.3) : "#8250df",
        width: many ? 1 : 2,
        value: fmtMs,
        // the curves' grids differ only at their last point (each run's
        // maximum): a line goes on through the others' points
        spanGaps: true,
      });
      cols.push(al.ys[i]);
    });
    sides.forEach(function (side, k) {
      series.push({
        label: "all runs of " + side, stroke: rgba(side, 1), width: 2.5, value: fmtMs, spanGaps: true,
      });
      cols.push(al.ys[runs.length + k]);
    });
    var top = al.x.length ? al.x[al.x.length - 1] : 1;
    var xa = xAxis("percentile");
    delete xa.incrs;
    xa.splits = function () {
      var s = [];
      for (var k = 0; k <= Math.floor(top + 1e-9); k++) s.push(k);
      return s;
    };
    xa.values = function (u, splits) { return splits.map(ninesLabel); };
    makeChart(el, {
      scales: { x: { time: false, range: [0, Math.max(1, top)] }, y: LOG_Y },
      series: series,
      axes: [xa, yAxis("latency (ms)")],
    }, cols);
  }

  function drawWaits(el) {
    // the bands come stacked (html_charts.wait_stack): band i spans
    // lo[i]..hi[i] from 0 up. uPlot fills a series down to the axis, so the
    // bands are drawn from the top one down, each opaque over the ones
    // above it: each shows only its own share
    var st = data.wait_stack;
    var series = [{ label: "s" }];
    var cols = [st.x];
    for (var i = st.names.length - 1; i >= 0; i--) {
      series.push({
        label: st.names[i],
        stroke: st.colors[i],
        fill: st.colors[i],
        width: 1,
        value: (function (band) {
          return function (u, v, si, idx) {
            var hi = st.hi[band][idx], lo = st.lo[band][idx];
            return hi === null || idx === null ? "–" : (100 * (hi - lo)).toFixed(1) + "%";
          };
        })(i),
      });
      cols.push(st.hi[i]);
    }
    var yax = yAxis("share of samples");
    yax.values = function (u, splits) { return splits.map(function (v) { return Math.round(100 * v) + "%"; }); };
    makeChart(el, {
      scales: { x: { time: false }, y: { range: [0, st.ymax] } },
      series: series,
      axes: [xAxis("interval start (s)"), yax],
    }, cols);
  }

  function drawHost(el) {
    // --host-stats: the client host's CPU by kind, per interval (the first
    // run that has it; with several runs, each run's page has its own)
    var run = runs.filter(function (r) {
      return (r.doc.intervals || []).some(function (iv) { return iv.host; });
    })[0];
    var al = align([intervalSeries(run)]);
    var ivs = al.ys[0];
    var kinds = [["user", "#1f6feb"], ["system", "#d9480f"], ["iowait", "#9a6700"], ["steal", "#c62828"]];
    var series = [{ label: "s" }];
    var cols = [al.x];
    kinds.forEach(function (k) {
      series.push({
        label: k[0],
        stroke: k[1],
        width: 1.5,
        value: function (u, v) { return v === null ? "–" : v.toFixed(1) + "%"; },
      });
      cols.push(ivs.map(function (iv) { return get(iv, ["host", "cpu_pct", k[0]]); }));
    });
    makeChart(el, {
      scales: { x: { time: false }, y: { range: [0, 100] } },
      series: series,
      axes: [xAxis("interval start (s)"), yAxis("% of the host's CPUs")],
    }, cols);
  }

  var drawers = {
    host: drawHost,
    tps: drawTps,
    latency: function (el) { drawLatency(el, "latency_ms", "latency"); },
    lag: function (el) { drawLatency(el, "lag_ms", "lag"); },
    percentiles: drawPercentiles,
    waits: drawWaits,
  };

  var placeholders = document.querySelectorAll("[data-chart]");
  for (var i = 0; i < placeholders.length; i++) {
    var el = placeholders[i];
    drawers[el.getAttribute("data-chart")](el);
  }

  var pending = null;
  window.addEventListener("resize", function () {
    clearTimeout(pending);
    pending = setTimeout(function () {
      charts.forEach(function (c) {
        c.chart.setSize({ width: width(c.el), height: c.chart.height });
      });
    }, 100);
  });

  window.pgsurgeCharts = charts.length;
  // each chart's name and y range, once drawn (the browser tests read them)
  window.pgsurgeScales = function () {
    return charts.map(function (c) {
      var y = c.chart.scales.y;
      return { chart: c.el.getAttribute("data-chart"), min: y.min, max: y.max };
    });
  };
  window.pgsurgeReady = true;
})();
