-- WeChat mini-program subscribe messages: one per order and kind (paid, delivered) of a JSAPI
-- payment under the mini program they are configured for, queued in the transaction that pays or
-- delivers the order, sent by the subscribe worker with retries. A buyer without consent (43101)
-- is recorded as refused, never tried again.
CREATE TABLE subscribe_messages (
    id           TEXT PRIMARY KEY,
    order_no     TEXT NOT NULL REFERENCES orders (order_no),
    attempt_ref  TEXT NOT NULL REFERENCES payment_attempts (attempt_ref),
    kind         TEXT NOT NULL CHECK (kind = 'paid' OR kind = 'delivered'),
    status       TEXT NOT NULL CHECK (status = 'pending' OR status = 'sent' OR status = 'refused' OR status = 'failed'),
    tries        BIGINT NOT NULL DEFAULT 0,
    next_at      BIGINT NOT NULL,
    lease_until  BIGINT NOT NULL DEFAULT 0,
    errcode      BIGINT,
    last_error   TEXT,
    created_at   BIGINT NOT NULL,
    sent_at      BIGINT,
    UNIQUE (order_no, kind)
);
CREATE INDEX subscribe_messages_due ON subscribe_messages (next_at) WHERE status = 'pending';
