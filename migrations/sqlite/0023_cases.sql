-- Complaints and disputes: a case a payment provider opened about a payment (a Stripe dispute or
-- early fraud warning, a WeChat Pay complaint, an Alipay trade complaint), kept once per provider
-- and case id. Its state is taken from what the provider says, the newest word winning whatever
-- order the messages arrive in; every message is kept as it arrived, every change of state is
-- logged in the same transaction, and a case for a payment kassa does not know is kept unlinked
-- (and alerted), never dropped.
CREATE TABLE cases (
    id               TEXT PRIMARY KEY,
    provider         TEXT NOT NULL CHECK (provider = 'stripe' OR provider = 'wechatpay' OR provider = 'alipay'),
    provider_case_id TEXT NOT NULL,
    kind             TEXT NOT NULL CHECK (kind = 'dispute' OR kind = 'fraud_warning' OR kind = 'complaint'),
    order_no         TEXT REFERENCES orders (order_no),
    attempt_ref      TEXT REFERENCES payment_attempts (attempt_ref),
    -- The provider's own payment id (a PaymentIntent, a transaction id): what links it.
    gateway_txn_id   TEXT,
    state            TEXT NOT NULL CHECK (state = 'needs_response' OR state = 'under_review' OR state = 'closed'),
    -- How a closed case ended: won, lost, prevented, warning_closed, not_actionable, resolved.
    outcome          TEXT,
    provider_status  TEXT NOT NULL,
    reason           TEXT,
    amount_minor     INTEGER,
    currency         TEXT,
    -- The deadline that matters next, and which one it is (evidence, first_reply, resolution).
    due_at           INTEGER,
    due_kind         TEXT,
    -- The provider's time of the word kept: an older one arriving later changes nothing.
    as_of            INTEGER NOT NULL,
    -- 1: the order's card keys, not yet shown to the buyer when the case opened, are held back
    -- from the buyer until the case closes or the operator releases them.
    keys_held        INTEGER NOT NULL DEFAULT 0 CHECK (keys_held = 0 OR keys_held = 1),
    opened_at        INTEGER NOT NULL,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    closed_at        INTEGER,
    CHECK ((state = 'closed') = (closed_at IS NOT NULL)),
    CHECK ((order_no IS NULL) = (attempt_ref IS NULL)),
    UNIQUE (provider, provider_case_id)
);
CREATE INDEX cases_by_state_due ON cases (state, due_at);
CREATE INDEX cases_by_order ON cases (order_no) WHERE order_no IS NOT NULL;

-- Every provider message about a case as it arrived (a notification, a poll's copy), and what the
-- operator sent, once each: message_id is the provider's event id, or a digest of a copy.
CREATE TABLE case_messages (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    case_id     TEXT NOT NULL REFERENCES cases (id),
    source      TEXT NOT NULL CHECK (source = 'notification' OR source = 'poll' OR source = 'operator'),
    message_id  TEXT NOT NULL,
    kind        TEXT NOT NULL,
    body        TEXT NOT NULL,
    received_at INTEGER NOT NULL,
    UNIQUE (case_id, message_id)
);

-- Each change of a case's state, in the transaction that made it.
CREATE TABLE case_events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    case_id     TEXT NOT NULL REFERENCES cases (id),
    from_state  TEXT,
    to_state    TEXT NOT NULL,
    provider_status TEXT NOT NULL,
    cause       TEXT NOT NULL,
    at          INTEGER NOT NULL
);
CREATE INDEX case_events_by_case ON case_events (case_id, id);
