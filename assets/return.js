(function () {
  var el = document.getElementById("status"), retry = document.getElementById("retry");
  var reason = document.getElementById("retry-reason");
  var url = el.getAttribute("data-poll"), own = el.getAttribute("data-own") === "true";
  var settled = ["paid", "delivered", "expired", "cancelled", "paid_after_expiry", "refunding", "refunded"];
  var first = el.getAttribute("data-status");
  var S = JSON.parse(document.documentElement.getAttribute("data-strings") || "{}");
  var tries = 0;
  function ended(a) { return a === "failed" || a === "cancelled"; }
  function show(o) {
    el.setAttribute("data-status", o.status); el.setAttribute("data-attempt", o.attempt_status || "");
    var failed = o.status === "pending_payment" && ended(o.attempt_status);
    el.textContent = o.status !== "pending_payment" ? (S["status." + o.status] || o.status)
      : o.attempt_status === "failed" ? S["js.payment_failed"]
      : o.attempt_status === "cancelled" ? S["js.payment_cancelled"] : S["js.payment_confirming"];
    if (failed) {
      reason.textContent = o.attempt_status === "cancelled" ? S["js.retry_cancelled"] : S["js.retry_failed"];
    }
    retry.hidden = !failed;
    // Paid now: the buyer's keys are on the page as the server renders it.
    if (own && (o.status === "paid" || o.status === "delivered") && settled.indexOf(first) < 0) { location.reload(); }
  }
  function poll() {
    var s = el.getAttribute("data-status");
    if (settled.indexOf(s) >= 0 || (s === "pending_payment" && ended(el.getAttribute("data-attempt"))) || tries++ > 300) { return; }
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (o) { if (o && o.status) { show(o); } })
      .catch(function () {})
      .then(function () { setTimeout(poll, 1000); });
  }
  poll();
})();
