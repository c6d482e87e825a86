// Draws each model's lag history with uPlot from the JSON the overview renders, again after
// every htmx refresh of the live part (no inline scripts: the console's CSP forbids them).
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
  document.addEventListener("DOMContentLoaded", draw);
  document.addEventListener("htmx:afterSettle", function () { plots = {}; draw(); });
})();
