-- The built-in sandbox gateway's own records, in a file of their own beside kassa's SQLite
-- database: the sandbox stands in for a remote gateway, so its writes must not queue behind (or
-- hold up) kassa's single SQLite writer. This migration runs with kassa's database attached as
-- `kassa_main` and copies the records an older version kept there.

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

CREATE TABLE sandbox_refunds (
    refund_no    TEXT PRIMARY KEY,
    attempt_ref  TEXT NOT NULL,
    amount_minor BIGINT NOT NULL,
    event_id     TEXT NOT NULL,
    created_at   BIGINT NOT NULL
);

INSERT INTO sandbox_payments (attempt_ref, merchant_id, amount_minor, currency, subject, notify_url, return_url,
                              expires_at, status, closed, txn_id, event_id, created_at, updated_at)
SELECT attempt_ref, merchant_id, amount_minor, currency, subject, notify_url, return_url,
       expires_at, status, closed, txn_id, event_id, created_at, updated_at
FROM kassa_main.sandbox_payments;

INSERT INTO sandbox_deliveries (id, attempt_ref, event_id, body, notify_url, status, tries, next_at, lease_until,
                                last_error, created_at)
SELECT id, attempt_ref, event_id, body, notify_url, status, tries, next_at, 0, last_error, created_at
FROM kassa_main.sandbox_deliveries;

INSERT INTO sandbox_refunds (refund_no, attempt_ref, amount_minor, event_id, created_at)
SELECT refund_no, attempt_ref, amount_minor, event_id, created_at FROM kassa_main.sandbox_refunds;

-- The old tables keep their rows (a transaction over two WAL files is not atomic across both, so
-- nothing is deleted there); kassa no longer reads them.
