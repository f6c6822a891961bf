-- WeChat mini-program shipping reports (发货信息录入): who paid a JSAPI attempt (the payer's
-- openid and the app id it is under), and one report per delivered order of such a payment,
-- queued with the delivery and sent by the shipping worker with retries.
-- Additive only: a previous version's kassa serving beside this one writes none of it.
ALTER TABLE payment_attempts ADD COLUMN payer_openid TEXT;
ALTER TABLE payment_attempts ADD COLUMN payer_appid TEXT;
CREATE TABLE shipping_reports (
    order_no        TEXT PRIMARY KEY REFERENCES orders (order_no),
    attempt_ref     TEXT NOT NULL REFERENCES payment_attempts (attempt_ref),
    status          TEXT NOT NULL CHECK (status = 'pending' OR status = 'reported' OR status = 'failed'),
    logistics_type  BIGINT NOT NULL CHECK (logistics_type BETWEEN 1 AND 4),
    tracking_no     TEXT,
    express_company TEXT,
    tries           BIGINT NOT NULL DEFAULT 0,
    next_at         BIGINT NOT NULL,
    lease_until     BIGINT NOT NULL DEFAULT 0,
    last_error      TEXT,
    created_at      BIGINT NOT NULL,
    reported_at     BIGINT
);
CREATE INDEX shipping_reports_due ON shipping_reports (next_at) WHERE status = 'pending';
