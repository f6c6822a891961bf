-- A second capture on an attempt that is already paid: the gateway took money again under the
-- same merchant reference with another transaction id (a buyer paying twice on one prepay, a
-- gateway re-sending after a reversal). Kept once per gateway transaction id, with the automatic
-- refund that returns it; a refund names the transaction it returns when that is not its
-- attempt's own.
-- Additive only: a previous version's kassa serving beside this one writes none of it.
ALTER TABLE refunds ADD COLUMN gateway_txn_id TEXT;

CREATE TABLE second_captures (
    gateway         TEXT NOT NULL,
    gateway_txn_id  TEXT NOT NULL,
    order_no        TEXT NOT NULL REFERENCES orders (order_no),
    attempt_ref     TEXT NOT NULL REFERENCES payment_attempts (attempt_ref),
    amount_minor    BIGINT NOT NULL CHECK (amount_minor > 0),
    currency        TEXT NOT NULL CHECK (length(currency) = 3),
    refund_no       TEXT NOT NULL REFERENCES refunds (refund_no),
    notification_id TEXT,
    created_at      BIGINT NOT NULL,
    PRIMARY KEY (gateway, gateway_txn_id)
);
CREATE INDEX second_captures_by_attempt ON second_captures (attempt_ref);
CREATE INDEX second_captures_by_order ON second_captures (order_no);
