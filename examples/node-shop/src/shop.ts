// A minimal shop backend on kassa: it places orders from its own server, sends the buyer to kassa's
// hand-off, and marks its orders paid and fulfilled from kassa's verified webhooks.
//
//   KASSA_URL=http://127.0.0.1:8080 SHOP_KEY=… WEBHOOK_SECRET=… PORT=8091 node dist/shop.js
//
// It talks to kassa through types generated from kassa's /openapi.json (`npm run generate`) and
// openapi-fetch, and serves, with Node's own http module:
//
//   POST /buy {"sku": "...", "quantity": 1}   place an order: {"order", "kassa_order_no", "payment"}
//   GET  /orders/<order>                      the shop's own order: {"order", "status", ...}
//   POST /kassa-events                        kassa's webhook (Kassa-Signature verified)

import crypto from "node:crypto";
import http from "node:http";
import createClient from "openapi-fetch";
import type { paths } from "./kassa.js";

const KASSA_URL = process.env.KASSA_URL ?? "http://127.0.0.1:8080";
const SHOP_KEY = required("SHOP_KEY");
const WEBHOOK_SECRET = required("WEBHOOK_SECRET");
const PORT = Number(process.env.PORT ?? "8091");
const TOLERANCE_SECONDS = 300;

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

interface ShopOrder {
  order: string;
  status: "awaiting_payment" | "paid" | "fulfilled" | "payment_mismatch";
  kassa_order_no: string;
  total_minor: number;
  currency: string;
  // The buyer's kassa session token: it reads the order (and its card keys) later.
  buyer_token: string;
}

// The shop's own orders, by its reference. A real shop keeps them in its database.
const orders = new Map<string, ShopOrder>();
const seenEvents = new Set<string>();
let next = 1;

const kassa = createClient<paths>({ baseUrl: KASSA_URL, headers: { "Kassa-Shop-Key": SHOP_KEY } });

/** Creates the buyer's session, the basket and the order at kassa, with the shop's reference. */
async function place(sku: string, quantity: number) {
  const session = await kassa.POST("/api/v1/sessions");
  if (!session.data) throw new Error(`session: ${JSON.stringify(session.error)}`);
  const auth = { Authorization: `Bearer ${session.data.token}` };
  const basket = await kassa.POST("/api/v1/baskets", { headers: auth, body: { lines: [{ sku, quantity }] } });
  if (!basket.data) throw new Error(`basket: ${JSON.stringify(basket.error)}`);
  const reference = `TS-${process.pid}-${next++}`;
  const placed = await kassa.POST("/api/v1/baskets/{basket_id}/checkout", {
    headers: auth,
    params: { path: { basket_id: basket.data.basket_id } },
    body: { gateway: "sandbox", merchant_reference: reference, metadata: { shop: "node-example" } },
  });
  // JSON (201), not the hand-off page kassa answers a browser asking for HTML.
  const order = placed.data;
  if (!order || typeof order === "string") throw new Error(`checkout: ${JSON.stringify(placed.error)}`);
  orders.set(reference, {
    order: reference,
    status: "awaiting_payment",
    kassa_order_no: order.order_no,
    total_minor: order.total_minor,
    currency: order.currency,
    buyer_token: session.data.token,
  });
  // The buyer's browser goes to kassa's hand-off: the form (or redirect, or app call) in `payment`.
  return {
    order: reference,
    kassa_order_no: order.order_no,
    attempt_ref: order.attempt_ref,
    payment: order.payment,
  };
}

/** Throws unless `header` (Kassa-Signature) signs `body`, as docs/webhooks.md says. */
function verify(header: string, body: Buffer, nowSeconds: number): void {
  const fields = new Map(
    header
      .split(",")
      .filter((part) => part.includes("="))
      .map((part) => [part.slice(0, part.indexOf("=")), part.slice(part.indexOf("=") + 1)] as const),
  );
  const t = fields.get("t");
  const v1 = fields.get("v1");
  if (!t || !v1 || !/^\d+$/.test(t)) throw new Error("malformed signature header");
  const expected = crypto.createHmac("sha256", WEBHOOK_SECRET).update(`${t}.`).update(body).digest();
  const given = Buffer.from(v1, "hex");
  if (given.length !== expected.length || !crypto.timingSafeEqual(given, expected)) {
    throw new Error("signature mismatch");
  }
  if (Math.abs(nowSeconds - Number(t)) > TOLERANCE_SECONDS) throw new Error("timestamp outside tolerance");
}

interface Message {
  topic: string;
  data: { merchant_reference?: string | null; captured_minor?: number | null; currency?: string };
}

/** Acts on a verified message once: a repeat of an event id is acknowledged and skipped. */
function act(eventId: string, message: Message): void {
  if (seenEvents.has(eventId)) return;
  seenEvents.add(eventId);
  const order = orders.get(message.data.merchant_reference ?? "");
  if (!order) return;
  if (message.topic === "order.paid") {
    // Money: what was paid must be what this order is owed.
    const matches = message.data.captured_minor === order.total_minor && message.data.currency === order.currency;
    order.status = matches ? "paid" : "payment_mismatch";
  } else if ((message.topic === "order.delivered" || message.topic === "fulfilment.requested") && order.status === "paid") {
    order.status = "fulfilled";
  }
}

function answer(res: http.ServerResponse, status: number, body?: unknown): void {
  const payload = body === undefined ? "" : JSON.stringify(body);
  res.writeHead(status, body === undefined ? {} : { "Content-Type": "application/json" });
  res.end(payload);
}

const server = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (chunk: Buffer) => chunks.push(chunk));
  req.on("end", () => {
    const body = Buffer.concat(chunks);
    const url = req.url ?? "";
    if (req.method === "POST" && url === "/buy") {
      const asked = JSON.parse(body.toString() || "{}") as { sku: string; quantity?: number };
      place(asked.sku, asked.quantity ?? 1).then(
        (placed) => answer(res, 201, placed),
        (e: Error) => answer(res, 502, { error: e.message }),
      );
    } else if (req.method === "POST" && url === "/kassa-events") {
      try {
        verify(String(req.headers["kassa-signature"] ?? ""), body, Date.now() / 1000);
      } catch (e) {
        answer(res, 400, { error: (e as Error).message });
        return;
      }
      act(String(req.headers["kassa-event-id"] ?? ""), JSON.parse(body.toString()) as Message);
      answer(res, 204);
    } else if (req.method === "GET" && url.startsWith("/orders/")) {
      const order = orders.get(url.slice("/orders/".length));
      if (!order) {
        answer(res, 404, { error: "not found" });
      } else {
        const { buyer_token: _token, ...shown } = order;
        answer(res, 200, shown);
      }
    } else {
      answer(res, 404, { error: "not found" });
    }
  });
});

server.listen(PORT, "127.0.0.1", () => console.log(`shop listening on http://127.0.0.1:${PORT}`));
