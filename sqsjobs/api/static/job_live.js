// sqsjobs console: a job page follows its job over GET /jobs/{id}/events (Server-Sent Events).
// Each progress report moves the bar and its line as it is written; the status line follows the
// job; at the end the page is loaded again to show the result. The page's own refresh
// (dashboard.js) goes on underneath: it reads the same record.
(function () {
  "use strict";
  var box = document.getElementById("job-events");
  if (!box || !window.EventSource) return;
  var source = new EventSource(box.dataset.events);

  function text(id, value) {
    var el = document.getElementById(id);
    if (el) el.textContent = value;
  }

  function describe(report) {
    var parts = [];
    if (report.fraction !== undefined && report.fraction !== null) parts.push(Math.round(report.fraction * 100) + "%");
    if (report.message) parts.push(report.message);
    if (report.data !== undefined && report.data !== null) parts.push(JSON.stringify(report.data).slice(0, 200));
    return parts.join("  ") + "  (report " + report.report + ")";
  }

  source.addEventListener("status", function (e) {
    text("job-live-status", JSON.parse(e.data).status);
  });
  source.addEventListener("progress", function (e) {
    var report = JSON.parse(e.data);
    var bar = document.getElementById("job-progress");
    if (bar) {
      if (report.fraction !== undefined && report.fraction !== null) bar.value = report.fraction;
      bar.dataset.report = String(report.report);
    }
    text("job-progress-text", describe(report));
  });
  source.addEventListener("end", function () {
    source.close();
    window.location.reload();
  });
})();
