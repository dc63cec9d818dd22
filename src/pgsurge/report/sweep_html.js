// pgsurge sweep page: draws the tps and p99 charts of sweep_html.py's data.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("pgsurge-data").textContent);
  var d = data.chart, charts = 0;
  function rgba(hex, a) {
    var n = parseInt(hex.slice(1), 16);
    return "rgba(" + (n >> 16) + "," + ((n >> 8) & 255) + "," + (n & 255) + "," + a + ")";
  }
  var TARGET = "#c92a2a";
  function draw(id, metric, ylabel, logY, target) {
    var el = document.getElementById(id);
    var series = [{ label: d.x_label }], cols = [d.x], bands = [];
    d.lines.forEach(function (line) {
      var base = series.length;
      series.push({ label: line.name + " median", stroke: line.color, width: 2,
                    points: { show: true, size: 6 } });
      cols.push(line[metric + "_median"]);
      series.push({ label: line.name + " high", stroke: rgba(line.color, 0.25), width: 1 });
      cols.push(line[metric + "_high"]);
      series.push({ label: line.name + " low", stroke: rgba(line.color, 0.25), width: 1 });
      cols.push(line[metric + "_low"]);
      bands.push({ series: [base + 1, base + 2], fill: rgba(line.color, 0.12) });
      if (line.knee !== null) {
        // the knee: a ring around the median at that client count
        series.push({ label: line.name + " knee", stroke: line.color,
                      paths: function () { return null; },
                      points: { show: true, size: 16, width: 2, fill: "rgba(0,0,0,0)" } });
        cols.push(d.x.map(function (x, i) {
          return i === line.knee ? line[metric + "_median"][i] : null;
        }));
      }
      var runs = line[metric + "_runs"], most = 0;
      runs.forEach(function (r) { most = Math.max(most, r.length); });
      for (var k = 0; k < most; k++) {
        series.push({ label: line.name + " run " + (k + 1), stroke: line.color,
                      paths: function () { return null; },
                      points: { show: true, size: 5, fill: rgba(line.color, 0.5) } });
        cols.push(runs.map(function (r) { return k < r.length ? r[k] : null; }));
      }
    });
    if (target !== null) {
      // capacity's latency target: a dashed line across the chart
      series.push({ label: "target", stroke: TARGET, width: 2, dash: [8, 5],
                    points: { show: false } });
      cols.push(d.x.map(function () { return target; }));
    }
    var xScale = { time: false };
    if (d.log2) { xScale.distr = 3; xScale.log = 2; }
    var xAxis = { label: d.x_label, stroke: "#5d6675", grid: { stroke: "#eceef2" } };
    if (!d.numeric) {
      xAxis.splits = function () { return d.x; };
      xAxis.values = function (u, s) { return s.map(function (v) { return d.x_labels[v] || ""; }); };
      xScale.range = [-0.5, d.x.length - 0.5];
    } else if (d.log2) {
      xAxis.splits = function () { return d.x; };
      xAxis.values = function (u, s) { return s.map(function (v) { return String(v); }); };
    }
    // the range follows the runs, not the bands: an interval from two runs
    // (t with one degree of freedom) can be ten times the data
    var top = 0, bottom = Infinity;
    d.lines.forEach(function (line) {
      line[metric + "_runs"].forEach(function (r) {
        r.forEach(function (v) { top = Math.max(top, v); if (v > 0) bottom = Math.min(bottom, v); });
      });
    });
    if (target !== null && target > 0) {
      top = Math.max(top, target);
      bottom = Math.min(bottom, target);
    }
    var yScale = logY
      ? { distr: 3, log: 10, range: function () { return [bottom / 1.5, top * 1.5]; } }
      : { range: function () { return [0, top > 0 ? top * 1.15 : 1]; } };
    var plot = new uPlot({
      width: Math.max(320, Math.min(el.clientWidth || 900, 1150)), height: 320,
      scales: { x: xScale, y: yScale }, series: series, bands: bands,
      axes: [xAxis, { label: ylabel, stroke: "#5d6675", grid: { stroke: "#eceef2" }, size: 60 }],
      legend: { show: false }
    }, cols, el);
    charts++;
    plots.push(plot);
  }
  var plots = [];
  draw("chart-tps", "tps", "tps", false, null);
  var latency = JSON.parse(document.getElementById("pgsurge-latency").textContent);
  draw("chart-p99", "p99", latency.label + " latency (ms)", true, latency.target_ms);
  // for the browser tests: the plots (uPlot objects) and the target
  window.pgsurgePlots = plots;
  window.pgsurgeTarget = latency.target_ms;
  window.pgsurgeCharts = charts;
  window.pgsurgeReady = true;
})();
