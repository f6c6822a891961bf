-- Digital goods (card keys), refunds, the transactional outbox, and refund support in the sandbox.

-- Refund status changes are logged like order and attempt ones: widen the entity check.
-- (SQLite cannot alter a CHECK constraint: rebuild the table, keeping ids and the append-only rule.)
CREATE TABLE status_events_new (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    order_no        TEXT NOT NULL,
    entity          TEXT NOT NULL CHECK (entity IN ('order', 'attempt', 'refund')),
    entity_id       TEXT NOT NULL,
    from_status     TEXT,
    to_status       TEXT NOT NULL,
    trigger_name    TEXT NOT NULL,
    notification_id TEXT,
    at              BIGINT NOT NULL
);
INSERT INTO status_events_new SELECT * FROM status_events;
DROP TABLE status_events;
ALTER TABLE status_events_new RENAME TO status_events;
CREATE INDEX status_events_by_order ON status_events (order_no, id);
CREATE INDEX status_events_by_notification ON status_events (notification_id) WHERE notification_id IS NOT NULL;
CREATE TRIGGER status_events_append_only_update BEFORE UPDATE ON status_events
    BEGIN SELECT RAISE(ABORT, 'status_events is append-only'); END;
CREATE TRIGGER status_events_append_only_delete BEFORE DELETE ON status_events
    BEGIN SELECT RAISE(ABORT, 'status_events is append-only'); END;

-- The status a refunding order returns to when its refunds end without refunding everything.
ALTER TABLE orders ADD COLUMN pre_refund_status TEXT;
-- What this attempt captured (set when it succeeded); refunds of an attempt never exceed it.
ALTER TABLE payment_attempts ADD COLUMN captured_minor BIGINT;
UPDATE payment_attempts SET captured_minor = amount_minor WHERE status = 'succeeded';

-- Card keys: stored encrypted (AES-256-GCM, key from configuration); the fingerprint (a keyed
-- hash) finds duplicates without the plaintext. A key belongs to at most one order line (I3).
CREATE TABLE card_keys (
    id           TEXT PRIMARY KEY,
    sku          TEXT NOT NULL REFERENCES skus (sku),
    fingerprint  TEXT NOT NULL,
    nonce        BLOB NOT NULL,
    ciphertext   BLOB NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('available', 'delivered')),
    order_no     TEXT REFERENCES orders (order_no),
    line_no      BIGINT,
    delivered_at BIGINT,
    created_at   BIGINT NOT NULL,
    UNIQUE (sku, fingerprint),
    CHECK ((status = 'delivered') = (order_no IS NOT NULL))
);
CREATE INDEX card_keys_available ON card_keys (sku, created_at) WHERE status = 'available';
CREATE INDEX card_keys_by_order ON card_keys (order_no);

CREATE TABLE refunds (
    refund_no         TEXT PRIMARY KEY,
    order_no          TEXT NOT NULL REFERENCES orders (order_no),
    attempt_ref       TEXT NOT NULL REFERENCES payment_attempts (attempt_ref),
    amount_minor      BIGINT NOT NULL CHECK (amount_minor > 0),
    currency          TEXT NOT NULL,
    reason            TEXT NOT NULL,
    kind              TEXT NOT NULL CHECK (kind IN ('merchant', 'late_payment', 'duplicate_payment')),
    status            TEXT NOT NULL CHECK (status IN ('requested', 'processing', 'succeeded', 'failed')),
    gateway_refund_id TEXT,
    failure           TEXT,
    tries             BIGINT NOT NULL DEFAULT 0,
    next_at           BIGINT NOT NULL DEFAULT 0,
    lease_until       BIGINT NOT NULL DEFAULT 0,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL
);
CREATE INDEX refunds_by_order ON refunds (order_no);
CREATE INDEX refunds_to_send ON refunds (next_at) WHERE status = 'requested';

-- Order events for the shop's own systems, written in the same transaction as the change and
-- relayed at least once to the merchant webhook.
CREATE TABLE outbox (
    id           TEXT PRIMARY KEY,
    order_no     TEXT NOT NULL,
    topic        TEXT NOT NULL,
    payload      TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'dead')),
    tries        BIGINT NOT NULL DEFAULT 0,
    next_at      BIGINT NOT NULL,
    lease_until  BIGINT NOT NULL DEFAULT 0,
    last_error   TEXT,
    created_at   BIGINT NOT NULL,
    delivered_at BIGINT
);
CREATE INDEX outbox_due ON outbox (next_at) WHERE status = 'pending';
CREATE INDEX outbox_by_order ON outbox (order_no);

CREATE TABLE sandbox_refunds (
    refund_no    TEXT PRIMARY KEY,
    attempt_ref  TEXT NOT NULL,
    amount_minor BIGINT NOT NULL,
    event_id     TEXT NOT NULL,
    created_at   BIGINT NOT NULL
);
