// pgjobq dashboard: the queues page's charts (uPlot) and live numbers, from /api/history and /api/queues.
// No inline script anywhere (the Content-Security-Policy forbids it): this file reads its settings from
// data attributes, and writes numbers with textContent only.
(function () {
  "use strict";
  var PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563"];
  var root = document.getElementById("charts");
  if (!root || typeof uPlot === "undefined") { return; }
  var interval = Math.max(1, parseFloat(root.dataset.interval || "5")) * 1000;
  var charts = {};

  function compact(v) {
    if (v == null) { return ""; }
    var a = Math.abs(v);
    if (a >= 1e6) { return +(v / 1e6).toFixed(1) + "M"; }
    if (a >= 1e3) { return +(v / 1e3).toFixed(1) + "k"; }
    return String(+v.toFixed(2));
  }

  function width(el) { return Math.max(300, el.clientWidth || 380); }

  function build(id, data, key, unit) {
    var el = document.getElementById(id);
    var names = data.queues.slice(0, PALETTE.length);
    var series = [{}].concat(names.map(function (name, i) {
      return { label: name, stroke: PALETTE[i], width: 2, spanGaps: false,
               value: function (u, v) { return v == null ? "—" : v + unit; } };
    }));
    var columns = [data.times].concat(names.map(function (name) { return data[key][name]; }));
    var opts = { width: width(el), height: 200, series: series, legend: { live: false },
                 scales: { x: { time: true }, y: { range: function (u, min, max) { return [0, Math.max(1, max * 1.1)]; } } },
                 axes: [{}, { size: 56, values: function (u, ticks) { return ticks.map(compact); } }] };
    if (charts[id]) { charts[id].destroy(); }
    el.textContent = "";
    charts[id] = { plot: new uPlot(opts, columns, el), names: names.join("\u0000") };
  }

  function draw(data) {
    [["chart-depth", "depth", ""], ["chart-done", "done_per_minute", "/min"],
     ["chart-failure", "failure_rate", " %"]].forEach(function (c) {
      var existing = charts[c[0]];
      var columns = [data.times].concat(data.queues.slice(0, PALETTE.length).map(function (n) { return data[c[1]][n]; }));
      if (existing && existing.names === data.queues.slice(0, PALETTE.length).join("\u0000")) {
        existing.plot.setData(columns);
      } else {
        build(c[0], data, c[1], c[2]);
      }
    });
  }

  function text(value, suffix) { return value == null ? "\u2014" : String(value) + (suffix || ""); }

  function seconds(value) {
    if (value == null) { return "\u2014"; }
    var s = Math.abs(value);
    if (s < 10) { return value.toFixed(1) + " s"; }
    if (s < 60) { return value.toFixed(0) + " s"; }
    if (s < 3600) { return (value / 60).toFixed(1) + " min"; }
    if (s < 86400) { return (value / 3600).toFixed(1) + " h"; }
    return (value / 86400).toFixed(1) + " d";
  }

  function cell(queue, field) {
    var cells = document.querySelectorAll("td[data-field='" + field + "']");
    for (var i = 0; i < cells.length; i++) {
      if (cells[i].dataset.queue === queue) { return cells[i]; }
    }
    return null;
  }

  function set(queue, field, value) {
    var td = cell(queue, field);
    if (!td) { return; }
    var target = td.querySelector("a") || td;
    if (target.textContent !== value) { target.textContent = value; }
  }

  function numbers(data) {
    data.queues.forEach(function (q) {
      ["runnable", "scheduled", "running", "waiting", "failed"].forEach(function (f) { set(q.queue, f, String(q[f])); });
      set(q.queue, "oldest", seconds(q.oldest_runnable_age));
      set(q.queue, "done_per_minute", text(q.done_per_minute));
      set(q.queue, "failure_rate", text(q.failure_rate, " %"));
      var buttons = document.querySelectorAll("button[data-action='retry'][data-queue]");
      for (var i = 0; i < buttons.length; i++) {
        if (buttons[i].dataset.queue === q.queue) { buttons[i].textContent = "Retry " + q.failed + " failed"; }
      }
    });
  }

  function get(url, then) {
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (d) { if (d) { then(d); } })
      .catch(function () { /* the next round tries again */ });
  }

  function tick() {
    get(root.dataset.history, draw);
    get(root.dataset.queues, numbers);
  }
  get(root.dataset.history, draw);
  setInterval(tick, interval);
  window.addEventListener("resize", function () {
    Object.keys(charts).forEach(function (id) {
      var el = document.getElementById(id);
      charts[id].plot.setSize({ width: width(el), height: 200 });
    });
  });
}());
