document.getElementById("confirm-form").addEventListener("submit", function () {
  // One order per click: the button is disabled, and the idempotency key makes a second post harmless.
  var S = JSON.parse(document.documentElement.getAttribute("data-strings") || "{}");
  var b = document.getElementById("confirm");
  setTimeout(function () { b.disabled = true; b.textContent = S["js.confirming"] || b.textContent; }, 0);
});
