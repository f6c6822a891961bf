"""A shop's webhook endpoint for kassa, verifying every message before acting on it.

    python3 verify.py PORT SECRET

Prints `verified <topic> <event id>` for each message it accepts and answers 204; a message whose
signature does not verify, or whose time is more than five minutes off, is answered 400 and
printed as `refused <reason>`. Only the standard library is used.
"""

import hashlib
import hmac
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

TOLERANCE_SECONDS = 300


def verify(secret: bytes, header: str, body: bytes, now: float) -> None:
    """Raises ValueError unless `header` (Kassa-Signature) signs `body` (the raw bytes)."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    t, v1 = fields.get("t"), fields.get("v1")
    if not t or not v1 or not t.isdigit():
        raise ValueError("malformed signature header")
    expected = hmac.new(secret, t.encode() + b"." + body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, v1):
        raise ValueError("signature mismatch")
    if abs(now - int(t)) > TOLERANCE_SECONDS:
        raise ValueError("timestamp outside tolerance")


class Handler(BaseHTTPRequestHandler):
    seen = set()

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            verify(SECRET, self.headers.get("Kassa-Signature", ""), body, time.time())
        except ValueError as e:
            print(f"refused {e}", flush=True)
            self.send_response(400)
            self.end_headers()
            return
        message = json.loads(body)
        event_id = self.headers["Kassa-Event-Id"]
        # At least once: the same id may come again; act on it once.
        if event_id not in Handler.seen:
            Handler.seen.add(event_id)
            print(f"verified {message['topic']} {event_id}", flush=True)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    port, SECRET = int(sys.argv[1]), sys.argv[2].encode()
    HTTPServer(("127.0.0.1", port), Handler).serve_forever()
