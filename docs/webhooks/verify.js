// A shop's webhook endpoint for kassa, verifying every message before acting on it.
//
//     node verify.js PORT SECRET
//
// Prints `verified <topic> <event id>` for each message it accepts and answers 204; a message
// whose signature does not verify, or whose time is more than five minutes off, is answered 400
// and printed as `refused <reason>`. Only Node's standard library is used.
"use strict";
const crypto = require("node:crypto");
const http = require("node:http");

const TOLERANCE_SECONDS = 300;

// Throws unless `header` (Kassa-Signature) signs `body` (the raw bytes, a Buffer).
function verify(secret, header, body, nowSeconds) {
  const fields = Object.fromEntries(
    header.split(",").filter((p) => p.includes("=")).map((p) => [p.slice(0, p.indexOf("=")), p.slice(p.indexOf("=") + 1)]),
  );
  if (!/^\d+$/.test(fields.t || "") || !/^[0-9a-f]{64}$/.test(fields.v1 || "")) {
    throw new Error("malformed signature header");
  }
  const expected = crypto.createHmac("sha256", secret).update(`${fields.t}.`).update(body).digest();
  if (!crypto.timingSafeEqual(expected, Buffer.from(fields.v1, "hex"))) {
    throw new Error("signature mismatch");
  }
  if (Math.abs(nowSeconds - Number(fields.t)) > TOLERANCE_SECONDS) {
    throw new Error("timestamp outside tolerance");
  }
}

const [port, secret] = [Number(process.argv[2]), process.argv[3]];
const seen = new Set();
http
  .createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      try {
        verify(secret, req.headers["kassa-signature"] || "", body, Date.now() / 1000);
      } catch (e) {
        console.log(`refused ${e.message}`);
        res.writeHead(400).end();
        return;
      }
      const message = JSON.parse(body);
      const eventId = req.headers["kassa-event-id"];
      // At least once: the same id may come again; act on it once.
      if (!seen.has(eventId)) {
        seen.add(eventId);
        console.log(`verified ${message.topic} ${eventId}`);
      }
      res.writeHead(204).end();
    });
  })
  .listen(port, "127.0.0.1");
