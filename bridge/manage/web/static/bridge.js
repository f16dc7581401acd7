/* celery-periodic-bridge dashboard, v1: local times, in-place refresh, confirmations.
   Every page works without it; it only makes them nicer. */
(function () {
  "use strict";
  var zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  var format = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "2-digit", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short"
  });
  var relative = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
  var steps = [["second", 60], ["minute", 60], ["hour", 24], ["day", 365], ["year", Infinity]];

  function ago(date) {
    var amount = (date.getTime() - Date.now()) / 1000;
    for (var i = 0; i < steps.length; i++) {
      if (Math.abs(amount) < steps[i][1]) { return relative.format(Math.round(amount), steps[i][0]); }
      amount /= steps[i][1];
    }
    return "";
  }

  function localise(root) {
    root.querySelectorAll("time[datetime]").forEach(function (node) {
      var date = new Date(node.getAttribute("datetime"));
      if (isNaN(date)) { return; }
      node.title = format.format(date) + " (" + zone + ")";
      node.textContent = format.format(date) + (node.hasAttribute("data-relative") ? " (" + ago(date) + ")" : "");
    });
    // The strip's marks: their tooltips in the zone the page shows its times in.
    root.querySelectorAll("[data-at]").forEach(function (node) {
      var date = new Date(node.getAttribute("data-at"));
      if (isNaN(date)) { return; }
      node.title = format.format(date) + ": " + node.getAttribute("data-status");
    });
    root.querySelectorAll("[data-zone]").forEach(function (node) { node.textContent = zone; });
  }

  function busy() {
    var active = document.activeElement;
    return active && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName);
  }

  function refresh(region) {
    if (document.hidden || busy()) { return; }
    fetch(region.getAttribute("data-refresh"), { credentials: "same-origin" })
      .then(function (response) {
        // Signed out meanwhile: show the sign-in page rather than put it in the list.
        if (response.redirected) { window.location.assign(response.url); return null; }
        return response.ok ? response.text() : null;
      })
      .then(function (html) {
        if (html === null) { return; }
        region.innerHTML = html;
        localise(region);
      })
      .catch(function () {});
  }

  document.addEventListener("DOMContentLoaded", function () {
    localise(document);
    setInterval(function () { localise(document); }, 30000);
    document.querySelectorAll("[data-refresh]").forEach(function (region) {
      setInterval(function () { refresh(region); }, 10000);
    });
    document.addEventListener("submit", function (event) {
      var question = event.target.getAttribute("data-confirm");
      if (question && !window.confirm(question)) { event.preventDefault(); }
    });
  });
})();
