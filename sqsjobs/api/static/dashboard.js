// sqsjobs dashboard: re-fetch the page every data-refresh-s seconds and swap #live in place.
// Paused while a form on the page is being filled in (a field has focus or was changed) and
// while the tab is hidden, so a refresh never wipes what the operator is typing.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var state = document.getElementById("refresh-state");
  if (!live || !live.dataset.refreshS) return;
  var every = Math.max(1, parseFloat(live.dataset.refreshS)) * 1000;
  var dirty = false;

  function editing() {
    var el = document.activeElement;
    return dirty || (el && el.form && live.contains(el) && el.tagName !== "BUTTON");
  }
  live.addEventListener("input", function () { dirty = true; });
  live.addEventListener("change", function () { dirty = true; });
  live.addEventListener("submit", function () { dirty = true; });

  function say(text) { if (state) state.textContent = text; }

  function tick() {
    if (document.hidden || editing()) { say("refresh paused"); return; }
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.text(); })
      .then(function (text) {
        if (editing()) return;
        var doc = new DOMParser().parseFromString(text, "text/html");
        var next = doc.getElementById("live");
        if (next) {
          live.innerHTML = next.innerHTML;  // the server escaped every value in this markup
          say("updated " + new Date().toLocaleTimeString());
        }
      })
      .catch(function (e) { say("refresh failed: " + e.message); });
  }
  window.setInterval(tick, every);
})();
