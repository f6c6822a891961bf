-- Statement reconciliation (对账): each gateway's statement of a day against kassa's records of it.
-- A day is kept once per gateway with both sides' totals; a finding is kept once per (gateway,
-- day, kind, subject), so re-running a day updates it, and closes it when it no longer holds.
-- The gateway's fee is kept on the payment and refund it was charged on, with the day whose
-- statement showed it.
-- Additive only: a previous version's kassa serving beside this one writes none of it.
ALTER TABLE payment_attempts ADD COLUMN fee_minor BIGINT;
ALTER TABLE payment_attempts ADD COLUMN statement_day TEXT;
ALTER TABLE refunds ADD COLUMN fee_minor BIGINT;
ALTER TABLE refunds ADD COLUMN statement_day TEXT;
-- Payments and refunds that succeeded in a time window, for kassa's side of a day.
CREATE INDEX status_events_succeeded ON status_events (at) WHERE to_status = 'succeeded';
-- Statement lines that name only the gateway's transaction id (Stripe's PaymentIntent).
CREATE INDEX payment_attempts_by_txn ON payment_attempts (gateway_txn_id) WHERE gateway_txn_id IS NOT NULL;

CREATE TABLE statement_days (
    gateway               TEXT NOT NULL,
    day                   TEXT NOT NULL CHECK (length(day) = 10),
    status                TEXT NOT NULL CHECK (status = 'reconciled' OR status = 'waiting' OR status = 'unreadable'),
    detail                TEXT,
    currency              TEXT NOT NULL CHECK (length(currency) = 3),
    lines                 BIGINT NOT NULL DEFAULT 0,
    gateway_count         BIGINT NOT NULL DEFAULT 0,
    gateway_gross_minor   BIGINT NOT NULL DEFAULT 0,
    gateway_refunds_minor BIGINT NOT NULL DEFAULT 0,
    gateway_fees_minor    BIGINT NOT NULL DEFAULT 0,
    gateway_net_minor     BIGINT NOT NULL DEFAULT 0,
    kassa_count           BIGINT NOT NULL DEFAULT 0,
    kassa_gross_minor     BIGINT NOT NULL DEFAULT 0,
    kassa_refunds_minor   BIGINT NOT NULL DEFAULT 0,
    kassa_fees_minor      BIGINT NOT NULL DEFAULT 0,
    kassa_net_minor       BIGINT NOT NULL DEFAULT 0,
    tries                 BIGINT NOT NULL DEFAULT 0,
    next_at               BIGINT NOT NULL DEFAULT 0,
    created_at            BIGINT NOT NULL,
    updated_at            BIGINT NOT NULL,
    PRIMARY KEY (gateway, day)
);

CREATE TABLE statement_findings (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    gateway     TEXT NOT NULL,
    day         TEXT NOT NULL,
    kind        TEXT NOT NULL,
    subject     TEXT NOT NULL,
    order_no    TEXT REFERENCES orders (order_no),
    ours        TEXT NOT NULL,
    theirs      TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state = 'open' OR state = 'closed' OR state = 'resolved'),
    note        TEXT,
    found_at    BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    FOREIGN KEY (gateway, day) REFERENCES statement_days (gateway, day),
    UNIQUE (gateway, day, kind, subject),
    CHECK ((state = 'resolved') = (note IS NOT NULL))
);
CREATE INDEX statement_findings_by_order ON statement_findings (order_no) WHERE order_no IS NOT NULL;
CREATE INDEX statement_findings_by_subject ON statement_findings (subject, kind);
