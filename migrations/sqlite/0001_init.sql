-- kassa schema, SQLite flavour. Times are BIGINT milliseconds since the Unix epoch (UTC);
-- money is BIGINT minor units with a separate ISO-4217 currency column.

CREATE TABLE settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE skus (
    sku         TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    kind        TEXT NOT NULL DEFAULT 'physical' CHECK (kind IN ('physical', 'digital')),
    price_minor BIGINT NOT NULL CHECK (price_minor >= 0),
    currency    TEXT NOT NULL CHECK (length(currency) = 3),
    -- units not yet sold (held ones included); reserved = held by pending orders; I1 in the DB.
    on_hand     BIGINT NOT NULL CHECK (on_hand >= 0),
    reserved    BIGINT NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    sold        BIGINT NOT NULL DEFAULT 0 CHECK (sold >= 0),
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    CHECK (reserved <= on_hand)
);

CREATE TABLE sessions (
    id         TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL UNIQUE,
    csrf_token TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE baskets (
    id         TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions (id),
    status     TEXT NOT NULL CHECK (status IN ('open', 'frozen')),
    order_no   TEXT UNIQUE,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    CHECK ((status = 'frozen') = (order_no IS NOT NULL))
);

CREATE TABLE basket_lines (
    basket_id         TEXT NOT NULL REFERENCES baskets (id),
    sku               TEXT NOT NULL REFERENCES skus (sku),
    quantity          BIGINT NOT NULL CHECK (quantity > 0),
    quoted_unit_minor BIGINT NOT NULL CHECK (quoted_unit_minor >= 0),
    currency          TEXT NOT NULL,
    PRIMARY KEY (basket_id, sku)
);

CREATE TABLE orders (
    order_no          TEXT PRIMARY KEY,
    session_id        TEXT NOT NULL REFERENCES sessions (id),
    basket_id         TEXT NOT NULL UNIQUE REFERENCES baskets (id),
    status            TEXT NOT NULL CHECK (status IN ('pending_payment', 'paid', 'delivered', 'expired',
                          'cancelled', 'paid_after_expiry', 'refunding', 'refunded')),
    total_minor       BIGINT NOT NULL CHECK (total_minor >= 0),
    currency          TEXT NOT NULL,
    captured_minor    BIGINT CHECK (captured_minor >= 0),
    captured_currency TEXT,
    gateway           TEXT NOT NULL,
    hold_expires_at   BIGINT NOT NULL,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL
);
CREATE INDEX orders_pending_by_expiry ON orders (hold_expires_at) WHERE status = 'pending_payment';
CREATE INDEX orders_by_session ON orders (session_id);

CREATE TABLE order_lines (
    order_no         TEXT NOT NULL REFERENCES orders (order_no),
    line_no          BIGINT NOT NULL,
    sku              TEXT NOT NULL REFERENCES skus (sku),
    name             TEXT NOT NULL,
    kind             TEXT NOT NULL,
    unit_price_minor BIGINT NOT NULL CHECK (unit_price_minor >= 0),
    quantity         BIGINT NOT NULL CHECK (quantity > 0),
    line_total_minor BIGINT NOT NULL CHECK (line_total_minor >= 0),
    PRIMARY KEY (order_no, line_no)
);

CREATE TABLE reservations (
    order_no   TEXT NOT NULL REFERENCES orders (order_no),
    sku        TEXT NOT NULL REFERENCES skus (sku),
    quantity   BIGINT NOT NULL CHECK (quantity > 0),
    status     TEXT NOT NULL CHECK (status IN ('active', 'consumed', 'released')),
    expires_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (order_no, sku)
);
CREATE INDEX reservations_by_sku ON reservations (sku, status);

CREATE TABLE payment_attempts (
    attempt_ref    TEXT PRIMARY KEY,
    order_no       TEXT NOT NULL REFERENCES orders (order_no),
    seq            BIGINT NOT NULL,
    gateway        TEXT NOT NULL,
    channel        TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('created', 'redirected', 'succeeded', 'failed',
                       'cancelled', 'expired', 'superseded', 'unknown')),
    amount_minor   BIGINT NOT NULL CHECK (amount_minor >= 0),
    currency       TEXT NOT NULL,
    gateway_txn_id TEXT,
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL,
    UNIQUE (order_no, seq)
);
-- I5 in the database: at most one active attempt per order.
CREATE UNIQUE INDEX payment_attempts_one_active ON payment_attempts (order_no)
    WHERE status IN ('created', 'redirected', 'unknown');

-- Append-only audit log of every status change (I7).
CREATE TABLE status_events (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    order_no        TEXT NOT NULL,
    entity          TEXT NOT NULL CHECK (entity IN ('order', 'attempt')),
    entity_id       TEXT NOT NULL,
    from_status     TEXT,
    to_status       TEXT NOT NULL,
    trigger_name    TEXT NOT NULL,
    notification_id TEXT,
    at              BIGINT NOT NULL
);
CREATE INDEX status_events_by_order ON status_events (order_no, id);
CREATE INDEX status_events_by_notification ON status_events (notification_id) WHERE notification_id IS NOT NULL;
CREATE TRIGGER status_events_append_only_update BEFORE UPDATE ON status_events
    BEGIN SELECT RAISE(ABORT, 'status_events is append-only'); END;
CREATE TRIGGER status_events_append_only_delete BEFORE DELETE ON status_events
    BEGIN SELECT RAISE(ABORT, 'status_events is append-only'); END;

CREATE TABLE idempotency_keys (
    session_id TEXT NOT NULL,
    idem_key   TEXT NOT NULL,
    basket_id  TEXT NOT NULL,
    order_no   TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (session_id, idem_key)
);

-- Every notification arrival, raw body kept. Only the first verified arrival of an event holds
-- event_id, so (gateway, event_id) is unique (I6); duplicates and rejects keep it in claimed_event_id.
CREATE TABLE notifications (
    id               TEXT PRIMARY KEY,
    gateway          TEXT NOT NULL,
    event_id         TEXT,
    claimed_event_id TEXT,
    status           TEXT NOT NULL CHECK (status IN ('received', 'applied', 'ignored',
                         'ignored_duplicate', 'rejected')),
    reason           TEXT,
    attempt_ref      TEXT,
    order_no         TEXT,
    raw_body         BLOB NOT NULL,
    received_at      BIGINT NOT NULL,
    UNIQUE (gateway, event_id)
);
CREATE INDEX notifications_by_order ON notifications (order_no);

CREATE TABLE alerts (
    id           TEXT PRIMARY KEY,
    kind         TEXT NOT NULL,
    dedupe_key   TEXT NOT NULL,
    severity     TEXT NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
    order_no     TEXT,
    details      TEXT NOT NULL,
    first_seen   BIGINT NOT NULL,
    last_seen    BIGINT NOT NULL,
    count        BIGINT NOT NULL DEFAULT 1,
    acknowledged BIGINT NOT NULL DEFAULT 0,
    UNIQUE (kind, dedupe_key)
);

-- The built-in sandbox gateway's own records: it behaves as a separate party sharing the database
-- only so that any instance of a fleet can serve it.
CREATE TABLE sandbox_payments (
    attempt_ref  TEXT PRIMARY KEY,
    merchant_id  TEXT NOT NULL,
    amount_minor BIGINT NOT NULL,
    currency     TEXT NOT NULL,
    subject      TEXT NOT NULL,
    notify_url   TEXT NOT NULL,
    return_url   TEXT NOT NULL,
    expires_at   BIGINT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('open', 'succeeded', 'failed', 'cancelled')),
    closed       BIGINT NOT NULL DEFAULT 0,
    txn_id       TEXT,
    event_id     TEXT,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL
);

CREATE TABLE sandbox_deliveries (
    id          TEXT PRIMARY KEY,
    attempt_ref TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    body        TEXT NOT NULL,
    notify_url  TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'dead')),
    tries       BIGINT NOT NULL DEFAULT 0,
    next_at     BIGINT NOT NULL,
    lease_until BIGINT NOT NULL DEFAULT 0,
    last_error  TEXT,
    created_at  BIGINT NOT NULL
);
CREATE INDEX sandbox_deliveries_due ON sandbox_deliveries (next_at) WHERE status = 'pending';
