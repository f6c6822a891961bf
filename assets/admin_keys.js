// The console's key import: sends the keys in batches, so a long list shows its progress and no
// request grows past the server's limits. Without this script the form posts every key at once.
"use strict";
(function () {
  var BATCH = 500;
  // The page's texts in the operator's language (admin.js.* of the catalog), with {placeholders}.
  var texts = JSON.parse((document.currentScript && document.currentScript.getAttribute("data-t")) || "{}");
  function say(key, values) {
    var text = texts["admin.js." + key] || key;
    Object.keys(values || {}).forEach(function (name) { text = text.split("{" + name + "}").join(values[name]); });
    return text;
  }
  document.querySelectorAll("form.keys-import").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var keys = form.elements.keys.value.split(/\r?\n/).map(function (k) { return k.trim(); })
        .filter(function (k) { return k.length > 0; });
      var bar = form.querySelector("progress");
      var text = form.querySelector(".progress");
      var button = form.querySelector("button");
      var sent = 0, imported = 0, duplicates = 0, batches = 0;
      bar.max = Math.max(keys.length, 1);
      bar.value = 0;
      bar.hidden = false;
      button.disabled = true;
      function report(extra) {
        text.textContent = say("progress", { sent: sent, total: keys.length, imported: imported,
          duplicates: duplicates }) + (extra || "");
      }
      function next() {
        if (sent >= keys.length) {
          report(say("done"));
          // The page again, with the SKU's figures as they are now.
          window.location.assign("/admin/skus?done=keys&n=" + imported + "&dup=" + duplicates + "&batches=" + batches);
          return;
        }
        var batch = keys.slice(sent, sent + BATCH);
        var body = new URLSearchParams();
        body.set("csrf", form.elements.csrf.value);
        body.set("keys", batch.join("\n"));
        fetch(form.action, {
          method: "POST",
          headers: { "Accept": "application/json" },
          body: body,
          credentials: "same-origin",
        }).then(function (r) {
          return r.json().then(function (answer) { return { ok: r.ok, answer: answer }; });
        }).then(function (result) {
          if (!result.ok) {
            report(say("stopped", { reason: (result.answer.error && result.answer.error.message) || say("refused") }));
            button.disabled = false;
            return;
          }
          sent += batch.length;
          batches += 1;
          imported += result.answer.imported;
          duplicates += result.answer.duplicates;
          bar.value = sent;
          report("");
          next();
        }).catch(function () {
          report(say("unreachable"));
          button.disabled = false;
        });
      }
      next();
    });
  });
})();
