-- CHECK constraints and partial-index conditions on a list of values compare in place
-- (`status = 'a' OR status = 'b'`) rather than with an IN list: SQLite evaluates an IN list of
-- three or more constants by building a temporary b-tree of it every time, and these conditions
-- run on every insert and on every update of their column (BENCHMARKS.md, "What each kept
-- optimization buys"). Each table that holds such a list is rebuilt with its conditions rewritten:
-- its rows copied aside, the table dropped and created anew under its own name (so every
-- reference to it still names it), the rows put back, its indexes and triggers created again.
-- Foreign keys stay on; deferred to the commit, they see each parent row back in its place
-- before they are checked. PostgreSQL's 0009 makes the same change with ALTER TABLE.
PRAGMA defer_foreign_keys = ON;

-- skus
CREATE TABLE kassa_copy_skus AS SELECT * FROM skus;
DROP TABLE skus;
CREATE TABLE skus (
    sku         TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    kind        TEXT NOT NULL DEFAULT 'physical' CHECK ((kind = 'physical' OR kind = 'digital')),
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
INSERT INTO skus SELECT * FROM kassa_copy_skus;
DROP TABLE kassa_copy_skus;

-- baskets
CREATE TABLE kassa_copy_baskets AS SELECT * FROM baskets;
DROP TABLE baskets;
CREATE TABLE baskets (
    id         TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions (id),
    status     TEXT NOT NULL CHECK ((status = 'open' OR status = 'frozen')),
    order_no   TEXT UNIQUE,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    CHECK ((status = 'frozen') = (order_no IS NOT NULL))
);
INSERT INTO baskets SELECT * FROM kassa_copy_baskets;
DROP TABLE kassa_copy_baskets;

-- orders
CREATE TABLE kassa_copy_orders AS SELECT * FROM orders;
DROP TABLE orders;
CREATE TABLE orders (
    order_no          TEXT PRIMARY KEY,
    session_id        TEXT NOT NULL REFERENCES sessions (id),
    basket_id         TEXT NOT NULL UNIQUE REFERENCES baskets (id),
    status            TEXT NOT NULL CHECK ((status = 'pending_payment' OR status = 'paid' OR status = 'delivered' OR status = 'expired' OR status = 'cancelled' OR status = 'paid_after_expiry' OR status = 'refunding' OR status = 'refunded')),
    total_minor       BIGINT NOT NULL CHECK (total_minor >= 0),
    currency          TEXT NOT NULL,
    captured_minor    BIGINT CHECK (captured_minor >= 0),
    captured_currency TEXT,
    gateway           TEXT NOT NULL,
    hold_expires_at   BIGINT NOT NULL,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL
, sweep_lease_until BIGINT NOT NULL DEFAULT 0, pre_refund_status TEXT, captured_attempt_ref TEXT);
INSERT INTO orders SELECT * FROM kassa_copy_orders;
DROP TABLE kassa_copy_orders;
CREATE INDEX orders_pending_by_expiry ON orders (hold_expires_at) WHERE status = 'pending_payment';
CREATE INDEX orders_by_session ON orders (session_id);
CREATE INDEX orders_paid_after_expiry ON orders (captured_attempt_ref) WHERE status = 'paid_after_expiry';

-- reservations
CREATE TABLE kassa_copy_reservations AS SELECT * FROM reservations;
DROP TABLE reservations;
CREATE TABLE reservations (
    order_no   TEXT NOT NULL REFERENCES orders (order_no),
    sku        TEXT NOT NULL REFERENCES skus (sku),
    quantity   BIGINT NOT NULL CHECK (quantity > 0),
    status     TEXT NOT NULL CHECK ((status = 'active' OR status = 'consumed' OR status = 'released')),
    expires_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (order_no, sku)
);
INSERT INTO reservations SELECT * FROM kassa_copy_reservations;
DROP TABLE kassa_copy_reservations;
CREATE INDEX reservations_by_sku ON reservations (sku, status);

-- payment_attempts
CREATE TABLE kassa_copy_payment_attempts AS SELECT * FROM payment_attempts;
DROP TABLE payment_attempts;
CREATE TABLE payment_attempts (
    attempt_ref    TEXT PRIMARY KEY,
    order_no       TEXT NOT NULL REFERENCES orders (order_no),
    seq            BIGINT NOT NULL,
    gateway        TEXT NOT NULL,
    channel        TEXT NOT NULL,
    status         TEXT NOT NULL CHECK ((status = 'created' OR status = 'redirected' OR status = 'succeeded' OR status = 'failed' OR status = 'cancelled' OR status = 'expired' OR status = 'superseded' OR status = 'unknown')),
    amount_minor   BIGINT NOT NULL CHECK (amount_minor >= 0),
    currency       TEXT NOT NULL,
    gateway_txn_id TEXT,
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL, captured_minor BIGINT, gateway_ref TEXT, query_tries BIGINT NOT NULL DEFAULT 0, next_query_at BIGINT NOT NULL DEFAULT 0,
    UNIQUE (order_no, seq)
);
INSERT INTO payment_attempts SELECT * FROM kassa_copy_payment_attempts;
DROP TABLE kassa_copy_payment_attempts;
CREATE UNIQUE INDEX payment_attempts_one_active ON payment_attempts (order_no)
    WHERE (status = 'created' OR status = 'redirected' OR status = 'unknown');
CREATE INDEX payment_attempts_unknown ON payment_attempts (updated_at) WHERE status = 'unknown';

-- notifications
CREATE TABLE kassa_copy_notifications AS SELECT * FROM notifications;
DROP TABLE notifications;
CREATE TABLE notifications (
    id               TEXT PRIMARY KEY,
    gateway          TEXT NOT NULL,
    event_id         TEXT,
    claimed_event_id TEXT,
    status           TEXT NOT NULL CHECK ((status = 'received' OR status = 'applied' OR status = 'ignored' OR status = 'ignored_duplicate' OR status = 'rejected')),
    reason           TEXT,
    attempt_ref      TEXT,
    order_no         TEXT,
    raw_body         BLOB NOT NULL,
    received_at      BIGINT NOT NULL,
    UNIQUE (gateway, event_id)
);
INSERT INTO notifications SELECT * FROM kassa_copy_notifications;
DROP TABLE kassa_copy_notifications;
CREATE INDEX notifications_by_order ON notifications (order_no);

-- alerts
CREATE TABLE kassa_copy_alerts AS SELECT * FROM alerts;
DROP TABLE alerts;
CREATE TABLE alerts (
    id           TEXT PRIMARY KEY,
    kind         TEXT NOT NULL,
    dedupe_key   TEXT NOT NULL,
    severity     TEXT NOT NULL CHECK ((severity = 'info' OR severity = 'warning' OR severity = 'critical')),
    order_no     TEXT,
    details      TEXT NOT NULL,
    first_seen   BIGINT NOT NULL,
    last_seen    BIGINT NOT NULL,
    count        BIGINT NOT NULL DEFAULT 1,
    acknowledged BIGINT NOT NULL DEFAULT 0, pushed_count BIGINT NOT NULL DEFAULT 0,
    UNIQUE (kind, dedupe_key)
);
INSERT INTO alerts SELECT * FROM kassa_copy_alerts;
DROP TABLE kassa_copy_alerts;

-- sandbox_payments
CREATE TABLE kassa_copy_sandbox_payments AS SELECT * FROM sandbox_payments;
DROP TABLE sandbox_payments;
CREATE TABLE sandbox_payments (
    attempt_ref  TEXT PRIMARY KEY,
    merchant_id  TEXT NOT NULL,
    amount_minor BIGINT NOT NULL,
    currency     TEXT NOT NULL,
    subject      TEXT NOT NULL,
    notify_url   TEXT NOT NULL,
    return_url   TEXT NOT NULL,
    expires_at   BIGINT NOT NULL,
    status       TEXT NOT NULL CHECK ((status = 'open' OR status = 'succeeded' OR status = 'failed' OR status = 'cancelled')),
    closed       BIGINT NOT NULL DEFAULT 0,
    txn_id       TEXT,
    event_id     TEXT,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL
);
INSERT INTO sandbox_payments SELECT * FROM kassa_copy_sandbox_payments;
DROP TABLE kassa_copy_sandbox_payments;

-- sandbox_deliveries
CREATE TABLE kassa_copy_sandbox_deliveries AS SELECT * FROM sandbox_deliveries;
DROP TABLE sandbox_deliveries;
CREATE TABLE sandbox_deliveries (
    id          TEXT PRIMARY KEY,
    attempt_ref TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    body        TEXT NOT NULL,
    notify_url  TEXT NOT NULL,
    status      TEXT NOT NULL CHECK ((status = 'pending' OR status = 'delivered' OR status = 'dead')),
    tries       BIGINT NOT NULL DEFAULT 0,
    next_at     BIGINT NOT NULL,
    lease_until BIGINT NOT NULL DEFAULT 0,
    last_error  TEXT,
    created_at  BIGINT NOT NULL
);
INSERT INTO sandbox_deliveries SELECT * FROM kassa_copy_sandbox_deliveries;
DROP TABLE kassa_copy_sandbox_deliveries;
CREATE INDEX sandbox_deliveries_due ON sandbox_deliveries (next_at) WHERE status = 'pending';

-- status_events
CREATE TABLE kassa_copy_status_events AS SELECT * FROM status_events;
DROP TABLE status_events;
CREATE TABLE "status_events" (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    order_no        TEXT NOT NULL,
    entity          TEXT NOT NULL CHECK ((entity = 'order' OR entity = 'attempt' OR entity = 'refund')),
    entity_id       TEXT NOT NULL,
    from_status     TEXT,
    to_status       TEXT NOT NULL,
    trigger_name    TEXT NOT NULL,
    notification_id TEXT,
    at              BIGINT NOT NULL
);
INSERT INTO status_events SELECT * FROM kassa_copy_status_events;
DROP TABLE kassa_copy_status_events;
CREATE INDEX status_events_by_order ON status_events (order_no, id);
CREATE INDEX status_events_by_notification ON status_events (notification_id) WHERE notification_id IS NOT NULL;
CREATE TRIGGER status_events_append_only_update BEFORE UPDATE ON status_events
    BEGIN SELECT RAISE(ABORT, 'status_events is append-only'); END;
CREATE TRIGGER status_events_append_only_delete BEFORE DELETE ON status_events
    BEGIN SELECT RAISE(ABORT, 'status_events is append-only'); END;
CREATE INDEX status_events_by_entity ON status_events (entity_id, entity, id);

-- card_keys
CREATE TABLE kassa_copy_card_keys AS SELECT * FROM card_keys;
DROP TABLE card_keys;
CREATE TABLE card_keys (
    id           TEXT PRIMARY KEY,
    sku          TEXT NOT NULL REFERENCES skus (sku),
    fingerprint  TEXT NOT NULL,
    nonce        BLOB NOT NULL,
    ciphertext   BLOB NOT NULL,
    status       TEXT NOT NULL CHECK ((status = 'available' OR status = 'delivered')),
    order_no     TEXT REFERENCES orders (order_no),
    line_no      BIGINT,
    delivered_at BIGINT,
    created_at   BIGINT NOT NULL,
    UNIQUE (sku, fingerprint),
    CHECK ((status = 'delivered') = (order_no IS NOT NULL))
);
INSERT INTO card_keys SELECT * FROM kassa_copy_card_keys;
DROP TABLE kassa_copy_card_keys;
CREATE INDEX card_keys_available ON card_keys (sku, created_at) WHERE status = 'available';
CREATE INDEX card_keys_by_order ON card_keys (order_no);

-- refunds
CREATE TABLE kassa_copy_refunds AS SELECT * FROM refunds;
DROP TABLE refunds;
CREATE TABLE refunds (
    refund_no         TEXT PRIMARY KEY,
    order_no          TEXT NOT NULL REFERENCES orders (order_no),
    attempt_ref       TEXT NOT NULL REFERENCES payment_attempts (attempt_ref),
    amount_minor      BIGINT NOT NULL CHECK (amount_minor > 0),
    currency          TEXT NOT NULL,
    reason            TEXT NOT NULL,
    kind              TEXT NOT NULL CHECK ((kind = 'merchant' OR kind = 'late_payment' OR kind = 'duplicate_payment')),
    status            TEXT NOT NULL CHECK ((status = 'requested' OR status = 'processing' OR status = 'succeeded' OR status = 'failed')),
    gateway_refund_id TEXT,
    failure           TEXT,
    tries             BIGINT NOT NULL DEFAULT 0,
    next_at           BIGINT NOT NULL DEFAULT 0,
    lease_until       BIGINT NOT NULL DEFAULT 0,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL
, query_tries BIGINT NOT NULL DEFAULT 0, next_query_at BIGINT NOT NULL DEFAULT 0);
INSERT INTO refunds SELECT * FROM kassa_copy_refunds;
DROP TABLE kassa_copy_refunds;
CREATE INDEX refunds_by_order ON refunds (order_no);
CREATE INDEX refunds_to_send ON refunds (next_at) WHERE status = 'requested';
CREATE INDEX refunds_processing ON refunds (next_query_at) WHERE status = 'processing';

-- outbox
CREATE TABLE kassa_copy_outbox AS SELECT * FROM outbox;
DROP TABLE outbox;
CREATE TABLE outbox (
    id           TEXT PRIMARY KEY,
    order_no     TEXT NOT NULL,
    topic        TEXT NOT NULL,
    payload      TEXT NOT NULL,
    status       TEXT NOT NULL CHECK ((status = 'pending' OR status = 'delivered' OR status = 'dead')),
    tries        BIGINT NOT NULL DEFAULT 0,
    next_at      BIGINT NOT NULL,
    lease_until  BIGINT NOT NULL DEFAULT 0,
    last_error   TEXT,
    created_at   BIGINT NOT NULL,
    delivered_at BIGINT
);
INSERT INTO outbox SELECT * FROM kassa_copy_outbox;
DROP TABLE kassa_copy_outbox;
CREATE INDEX outbox_due ON outbox (next_at) WHERE status = 'pending';
CREATE INDEX outbox_by_order ON outbox (order_no);
-- Every list rewritten and every reference intact, else this migration fails and rolls back.
CREATE TABLE kassa_rebuild_check (
    leftover TEXT CONSTRAINT every_condition_compares CHECK (leftover IS NULL),
    orphans  BIGINT CONSTRAINT every_reference_holds CHECK (orphans = 0)
);
INSERT INTO kassa_rebuild_check
    SELECT (SELECT group_concat(name) FROM sqlite_schema WHERE sql LIKE '% IN (''%'),
           (SELECT COUNT(*) FROM pragma_foreign_key_check);
DROP TABLE kassa_rebuild_check;
