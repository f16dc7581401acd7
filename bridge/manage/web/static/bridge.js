/* celery-periodic-bridge dashboard, v1: local times, in-place refresh, confirmations,
   and on the schedule's form a preview of the timer's next runs and a check of its JSON
   fields before it is sent. Every page works without it; it only makes them nicer. */
(function () {
  "use strict";
  var zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  var format = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "2-digit", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short"
  });
  var clock = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" });
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
    // The marks of the strips and the timeline's bars (an SVG shape says it in its <title>).
    root.querySelectorAll("[data-at]").forEach(function (node) {
      var date = new Date(node.getAttribute("data-at"));
      if (isNaN(date)) { return; }
      var said = format.format(date) + ": " + node.getAttribute("data-status");
      var title = node.querySelector("title");
      if (title) { title.textContent = said; } else { node.title = said; }
    });
    // The timeline's hours, as the browser's clock shows them.
    root.querySelectorAll("[data-clock]").forEach(function (node) {
      var date = new Date(node.getAttribute("data-clock"));
      if (isNaN(date)) { return; }
      node.textContent = clock.format(date);
    });
    root.querySelectorAll("[data-zone]").forEach(function (node) { node.textContent = zone; });
  }

  function busy() {
    var active = document.activeElement;
    // A field being typed in, or schedules ticked for a bulk action, would be lost.
    return (active && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName)) ||
      document.querySelector("input[form=bulk]:checked") !== null;
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

  function note(region, text, kind) {
    var line = document.createElement("p");
    if (kind) { line.className = kind; }
    line.textContent = text;
    region.appendChild(line);
  }

  // The next runs of the timer and zone being typed, as the bridge forecasts them, in the
  // browser's zone and the schedule's; a refusal as the server words it.
  function preview(form) {
    var region = form.querySelector("[data-preview]");
    var timer = form.querySelector("[name=timer]");
    var zoneField = form.querySelector("[name=timezone]");
    if (!region || !timer) { return; }
    var waiting = null, asked = 0;
    function show() {
      if (!timer.value.trim()) { region.hidden = true; return; }
      var ask = ++asked;
      var query = new URLSearchParams({ timer: timer.value, timezone: zoneField ? zoneField.value : "" });
      fetch(region.getAttribute("data-preview") + "?" + query, { credentials: "same-origin" })
        .then(function (response) {
          if (response.redirected) { return null; }
          return response.json().then(function (body) { return { ok: response.ok, body: body }; });
        })
        .then(function (answer) {
          if (!answer || ask !== asked) { return; }
          region.textContent = "";
          region.hidden = false;
          if (!answer.ok) { note(region, answer.body.message || "refused", "error"); return; }
          var theirs = null;
          try {
            theirs = new Intl.DateTimeFormat(undefined, {
              year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit",
              minute: "2-digit", second: "2-digit", timeZoneName: "short", timeZone: answer.body.timezone
            });
          } catch (unknown) { theirs = null; }
          if (!answer.body.runs.length) { note(region, "No run to come."); return; }
          note(region, "Next runs, in your zone (" + zone + ") and the schedule's (" + answer.body.timezone + "):");
          var list = document.createElement("ol");
          answer.body.runs.forEach(function (text) {
            var at = new Date(text), item = document.createElement("li");
            item.textContent = format.format(at) + (theirs ? " \u2014 " + theirs.format(at) : "");
            list.appendChild(item);
          });
          region.appendChild(list);
        })
        .catch(function () {});
    }
    [timer, zoneField].forEach(function (field) {
      if (!field) { return; }
      field.addEventListener("input", function () { clearTimeout(waiting); waiting = setTimeout(show, 300); });
    });
    show();
  }

  // args, kwargs, options and a canvas must be JSON ('none' clears a canvas): said beside
  // the field before the form is sent.
  function jsonChecks(form) {
    var fields = ["args", "kwargs", "options", "signature"].map(function (name) {
      return form.querySelector("input[name=" + name + "]");
    }).filter(Boolean);
    function check(field) {
      var problem = "";
      var cleared = field.name === "signature" && field.value.trim() === "none";
      if (field.value.trim() && !cleared) {
        try { JSON.parse(field.value); } catch (error) { problem = field.name + ": not JSON (" + error.message + ")"; }
      }
      var shown = field.parentNode.querySelector(".json-error");
      if (problem && !shown) {
        shown = document.createElement("p");
        shown.className = "error json-error";
        shown.setAttribute("role", "alert");
        field.insertAdjacentElement("afterend", shown);
      }
      if (shown) { shown.textContent = problem; shown.hidden = !problem; }
      if (problem) { field.setAttribute("aria-invalid", "true"); }
      return !problem;
    }
    fields.forEach(function (field) { field.addEventListener("blur", function () { check(field); }); });
    form.addEventListener("submit", function (event) {
      var bad = fields.filter(function (field) { return !check(field); });
      if (bad.length) { event.preventDefault(); bad[0].focus(); }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("form").forEach(function (form) {
      if (form.querySelector("[data-preview]")) { preview(form); jsonChecks(form); }
    });
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
