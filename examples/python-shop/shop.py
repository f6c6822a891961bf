"""A minimal shop backend on kassa: it places orders from its own server, sends the buyer to
kassa's hand-off, and marks its orders paid and fulfilled from kassa's verified webhooks.

    KASSA_URL=http://127.0.0.1:8080 SHOP_KEY=… WEBHOOK_SECRET=… PORT=8090 python3 shop.py

It talks to kassa through `kassa_client`, generated from kassa's /openapi.json (see README.md), and
serves, with the standard library:

    POST /buy {"sku": "...", "quantity": 1}   place an order: {"order", "kassa_order_no", "payment"}
    GET  /orders/<order>                      the shop's own order: {"order", "status", ...}
    POST /kassa-events                        kassa's webhook (Kassa-Signature verified)
"""

import hashlib
import hmac
import itertools
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kassa_client import AuthenticatedClient, Client
from kassa_client.api.buyer import (
    post_api_v1_baskets,
    post_api_v1_baskets_basket_id_checkout,
    post_api_v1_sessions,
)
from kassa_client.models import (
    CheckoutBody,
    CheckoutBodyGatewayType1,
    CheckoutBodyMetadataType0,
    NewBasketBody,
    NewBasketBodyLinesItem,
)

KASSA_URL = os.environ.get("KASSA_URL", "http://127.0.0.1:8080")
SHOP_KEY = os.environ["SHOP_KEY"]
WEBHOOK_SECRET = os.environ["WEBHOOK_SECRET"].encode()
PORT = int(os.environ.get("PORT", "8090"))
TOLERANCE_SECONDS = 300

# The shop's own orders, by its reference. A real shop keeps them in its database, with the buyer's
# kassa session token (it reads the order and its card keys later).
orders: dict = {}
seen_events: set = set()
lock = threading.Lock()
numbers = itertools.count(1)


def place(sku: str, quantity: int) -> dict:
    """Creates the buyer's session, the basket and the order at kassa, with the shop's reference."""
    shop = Client(base_url=KASSA_URL, headers={"Kassa-Shop-Key": SHOP_KEY}, raise_on_unexpected_status=True)
    session = post_api_v1_sessions.sync(client=shop)
    buyer = AuthenticatedClient(
        base_url=KASSA_URL, token=session.token, headers={"Kassa-Shop-Key": SHOP_KEY}, raise_on_unexpected_status=True
    )
    basket = post_api_v1_baskets.sync(
        client=buyer, body=NewBasketBody(lines=[NewBasketBodyLinesItem(sku=sku, quantity=quantity)])
    )
    reference = f"PY-{os.getpid()}-{next(numbers)}"
    metadata = CheckoutBodyMetadataType0.from_dict({"shop": "python-example"})
    placed = post_api_v1_baskets_basket_id_checkout.sync(
        client=buyer,
        basket_id=basket.basket_id,
        body=CheckoutBody(gateway=CheckoutBodyGatewayType1.SANDBOX, merchant_reference=reference, metadata=metadata),
    )
    with lock:
        orders[reference] = {
            "order": reference,
            "status": "awaiting_payment",
            "kassa_order_no": placed.order_no,
            "total_minor": placed.total_minor,
            "currency": placed.currency,
            "buyer_token": session.token,
        }
    # The buyer's browser goes to kassa's hand-off: the form (or redirect, or app call) in `payment`.
    payment = placed.payment.to_dict() if placed.payment else None
    return {"order": reference, "kassa_order_no": placed.order_no, "attempt_ref": placed.attempt_ref, "payment": payment}


def verify(header: str, body: bytes, now: float) -> None:
    """Raises ValueError unless `header` (Kassa-Signature) signs `body`, as docs/webhooks.md says."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    t, v1 = fields.get("t"), fields.get("v1")
    if not t or not v1 or not t.isdigit():
        raise ValueError("malformed signature header")
    expected = hmac.new(WEBHOOK_SECRET, t.encode() + b"." + body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, v1):
        raise ValueError("signature mismatch")
    if abs(now - int(t)) > TOLERANCE_SECONDS:
        raise ValueError("timestamp outside tolerance")


def act(event_id: str, message: dict) -> None:
    """Acts on a verified message once: a repeat of an event id is acknowledged and skipped."""
    data = message.get("data", {})
    with lock:
        if event_id in seen_events:
            return
        seen_events.add(event_id)
        order = orders.get(data.get("merchant_reference"))
        if order is None:
            return
        topic = message["topic"]
        if topic == "order.paid":
            # Money: what was paid must be what this order is owed.
            if (data.get("captured_minor"), data.get("currency")) != (order["total_minor"], order["currency"]):
                order["status"] = "payment_mismatch"
                return
            order["status"] = "paid"
        elif topic in ("order.delivered", "fulfilment.requested") and order["status"] == "paid":
            order["status"] = "fulfilled"


class Handler(BaseHTTPRequestHandler):
    def answer(self, status: int, body=None) -> None:
        payload = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/buy":
            asked = json.loads(body or b"{}")
            try:
                self.answer(201, place(asked["sku"], int(asked.get("quantity", 1))))
            except Exception as e:  # kassa refused (out of stock, …): say so
                self.answer(502, {"error": str(e)})
        elif self.path == "/kassa-events":
            try:
                verify(self.headers.get("Kassa-Signature", ""), body, time.time())
            except ValueError as e:
                self.answer(400, {"error": str(e)})
                return
            act(self.headers.get("Kassa-Event-Id", ""), json.loads(body))
            self.answer(204)
        else:
            self.answer(404, {"error": "not found"})

    def do_GET(self):
        order = orders.get(self.path.removeprefix("/orders/")) if self.path.startswith("/orders/") else None
        if order is None:
            self.answer(404, {"error": "not found"})
        else:
            self.answer(200, {k: v for k, v in order.items() if k != "buyer_token"})

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
    print(f"shop listening on http://127.0.0.1:{PORT}", flush=True)
    server.serve_forever()
