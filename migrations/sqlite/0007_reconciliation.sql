-- The gateway's own id for an attempt (a Stripe Checkout Session), needed to query and close it.
ALTER TABLE payment_attempts ADD COLUMN gateway_ref TEXT;
-- Active query bookkeeping: when the reconciler may look at an attempt or refund again.
ALTER TABLE payment_attempts ADD COLUMN query_tries BIGINT NOT NULL DEFAULT 0;
ALTER TABLE payment_attempts ADD COLUMN next_query_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE refunds ADD COLUMN query_tries BIGINT NOT NULL DEFAULT 0;
ALTER TABLE refunds ADD COLUMN next_query_at BIGINT NOT NULL DEFAULT 0;

-- Every difference the reconciler found between kassa and a gateway, and what it did about it.
CREATE TABLE reconciliation_findings (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    kind        TEXT NOT NULL,
    gateway     TEXT NOT NULL,
    order_no    TEXT,
    attempt_ref TEXT,
    refund_no   TEXT,
    ours        TEXT NOT NULL,
    theirs      TEXT NOT NULL,
    action      TEXT NOT NULL,
    found_at    BIGINT NOT NULL
);
CREATE INDEX reconciliation_findings_by_order ON reconciliation_findings (order_no);
