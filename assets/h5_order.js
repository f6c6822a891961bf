(function () {
  var el = document.getElementById("status"), keys = document.getElementById("keys"), note = document.getElementById("poll-state");
  var retry = document.getElementById("retry"), reason = document.getElementById("retry-reason");
  var unavailable = document.getElementById("keys-unavailable");
  var settled = ["paid", "delivered", "expired", "cancelled", "paid_after_expiry", "refunding", "refunded"];
  var url = "/api/v1/orders/" + encodeURIComponent(el.getAttribute("data-order"));
  var S = JSON.parse(document.documentElement.getAttribute("data-strings") || "{}");
  var tries = 0;
  function ended(a) { return a === "failed" || a === "cancelled"; }
  function render(o) {
    var attempts = o.attempts || [], last = attempts.length ? attempts[attempts.length - 1].status : "";
    el.textContent = S["status." + o.status] || o.status; el.setAttribute("data-status", o.status); el.setAttribute("data-attempt", last);
    var failed = o.status === "pending_payment" && ended(last);
    if (failed) {
      reason.textContent = last === "cancelled" ? S["js.retry_cancelled"] : S["js.retry_failed"];
    }
    retry.hidden = !failed;
    var list = [], missing = 0;
    (o.lines || []).forEach(function (l) { (l.keys || []).forEach(function (k) { list.push(k); }); missing += l.keys_unavailable || 0; });
    keys.textContent = "";
    list.forEach(function (k) { var li = document.createElement("li"); li.className = "key"; li.textContent = k; keys.appendChild(li); });
    unavailable.hidden = missing === 0;
    if (missing > 0) { unavailable.textContent = (S["js.keys_unavailable"] || "{count}").replace("{count}", missing); }
  }
  function poll() {
    // Stop at a final state: paid orders with goods still to deliver keep polling until delivered.
    var s = el.getAttribute("data-status");
    if ((settled.indexOf(s) >= 0 && s !== "paid") || tries++ > 600) { note.textContent = S["js.final"]; return; }
    if (s === "pending_payment" && ended(el.getAttribute("data-attempt"))) { note.textContent = ""; return; }
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (o) { if (o) { render(o); } })
      .catch(function () {})
      .then(function () { setTimeout(poll, 2000); });
  }
  poll();
})();
