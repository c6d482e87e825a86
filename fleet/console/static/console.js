// Draws each model's lag, throughput, p99 and batch-size history with uPlot from the JSON the
// overview renders (each box says in data-points how many values it drew), and the Shadow
// page's agreement and latency plots from the JSON each report carries; again after every htmx
// swap (no inline scripts: the console's CSP forbids them).
(function () {
  "use strict";
  var plots = {};
  function draw() {
    var holder = document.getElementById("chart-data");
    if (!holder || typeof uPlot === "undefined") { return; }
    var charts = JSON.parse(holder.textContent || "{}");
    document.querySelectorAll("[data-chart]").forEach(function (box) {
      var name = box.getAttribute("data-chart");
      var series = charts[name];
      if (!series || series[0].length < 2) { box.textContent = "lag history: waiting for samples"; return; }
      var old = plots[name];
      if (old && old.root.isConnected) { old.setData(series); return; }
      box.textContent = "";
      plots[name] = new uPlot({
        title: "lag of " + name + " (records)", width: Math.min(box.clientWidth || 800, 900), height: 180,
        series: [{}, { label: "lag", stroke: "#c0392b", width: 2 }],
        axes: [{}, { size: 60 }]
      }, series, box);
    });
  }
  var SERVING = {
    per_s: { title: "throughput of ", unit: " (req/s)", series: [["req/s", "per_s", "#2980b9"]] },
    p99_ms: { title: "p99 latency of ", unit: " (ms)", series: [["p99", "p99_ms", "#8e44ad"]] },
    batch: { title: "batch size of ", unit: " (records)",
             series: [["mean last batch", "batch", "#16a085"], ["max batch", "max_batch", "#7f8c8d"]] }
  };
  function drawServing() {
    var holder = document.getElementById("serving-data");
    if (!holder || typeof uPlot === "undefined") { return; }
    var all = JSON.parse(holder.textContent || "{}");
    document.querySelectorAll("[data-serving-chart]").forEach(function (box) {
      var name = box.getAttribute("data-serving-chart");
      var kind = SERVING[box.getAttribute("data-kind")];
      var columns = all[name];
      if (!kind || !columns) { return; }
      var data = [columns.t];
      var points = 0;
      kind.series.forEach(function (s) {
        data.push(columns[s[1]]);
        points += columns[s[1]].filter(function (v) { return v !== null; }).length;
      });
      if (columns.t.length < 2 || points < 2) {
        box.textContent = kind.title.trim() + " " + name + ": waiting for samples"; return;
      }
      box.textContent = "";
      new uPlot({
        title: kind.title + name + kind.unit, width: Math.min(box.clientWidth || 800, 900), height: 160,
        series: [{}].concat(kind.series.map(function (s) { return { label: s[0], stroke: s[2], width: 2 }; })),
        axes: [{}, { size: 60 }]
      }, data, box);
      box.setAttribute("data-points", String(points));
    });
  }
  function drawShadow() {
    if (typeof uPlot === "undefined") { return; }
    document.querySelectorAll("script.shadow-data").forEach(function (holder) {
      var model = holder.getAttribute("data-model");
      var data = JSON.parse(holder.textContent || "null");
      if (!data) { return; }
      document.querySelectorAll(".shadow-chart").forEach(function (box) {
        if (box.getAttribute("data-model") !== model || box.getAttribute("data-drawn")) { return; }
        var width = Math.min(box.clientWidth || 800, 900);
        box.setAttribute("data-drawn", "1");
        if (box.getAttribute("data-shadow-chart") === "agreement") {
          new uPlot({
            title: "agreement of the candidate with stable (share of comparisons)", width: width, height: 180,
            scales: { y: { range: [0, 1] } },
            series: [{}, { label: "agreement", stroke: "#27ae60", width: 2 }], axes: [{}, { size: 50 }]
          }, [data.t, data.agreement], box);
        } else {
          new uPlot({
            title: "mean latency per version (ms)", width: width, height: 180,
            series: [{}, { label: "stable (live)", stroke: "#2c3e50", width: 2 },
                     { label: "candidate (shadow)", stroke: "#e67e22", width: 2 }], axes: [{}, { size: 50 }]
          }, [data.t, data.live_ms, data.shadow_ms], box);
        }
      });
    });
  }
  document.addEventListener("DOMContentLoaded", function () { draw(); drawServing(); drawShadow(); });
  document.addEventListener("htmx:afterSettle", function () { plots = {}; draw(); drawServing(); drawShadow(); });
})();
