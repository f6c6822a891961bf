// The QR hand-off: counts down to the code's end and polls the order; once the payment is known
// (or the code has run out) it goes on to the return page, which says what happened.
"use strict";
(function () {
  var el = document.getElementById("status"), left = document.getElementById("left");
  var ends = Date.parse(document.getElementById("expires").getAttribute("datetime"));
  var poll = el.getAttribute("data-poll"), done = el.getAttribute("data-done");
  var S = JSON.parse(document.documentElement.getAttribute("data-strings") || "{}");
  var tries = 0;
  function tick() {
    var s = Math.max(0, Math.round((ends - Date.now()) / 1000));
    left.textContent = s > 0
      ? (S["js.left"] || "{min} min {s} s left").replace("{min}", Math.floor(s / 60)).replace("{s}", s % 60)
      : (S["js.ended"] || "ended");
    if (s > 0) { setTimeout(tick, 1000); }
  }
  function check() {
    if (tries++ > 1800) { return; }
    fetch(poll, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (o) {
        if (o && (o.status !== "pending_payment" || o.attempt_status === "failed" || Date.now() > ends)) {
          el.setAttribute("data-status", o.status);
          window.location.assign(done);
          return;
        }
        setTimeout(check, 2000);
      })
      .catch(function () { setTimeout(check, 2000); });
  }
  tick();
  check();
})();
