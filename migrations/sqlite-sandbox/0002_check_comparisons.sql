-- The sandbox's conditions compare in place, as kassa's own do (migrations/sqlite/0009 says why
-- and how): each table that holds a list rebuilt with its conditions rewritten.

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
-- Every list rewritten, else this migration fails and rolls back.
CREATE TABLE kassa_rebuild_check (
    leftover TEXT CONSTRAINT every_condition_compares CHECK (leftover IS NULL)
);
INSERT INTO kassa_rebuild_check
    SELECT group_concat(name) FROM main.sqlite_schema WHERE sql LIKE '% IN (''%';
DROP TABLE kassa_rebuild_check;
