-- CHECK constraints and partial-index conditions on a list of values compare in place
-- (`status = 'a' OR status = 'b'`), the same conditions as SQLite's 0009 (where an IN list costs a
-- temporary b-tree per evaluation; BENCHMARKS.md). Each constraint is replaced by its rewritten
-- form under the same name, and the one partial index is created again with its condition so.
ALTER TABLE alerts DROP CONSTRAINT alerts_severity_check,
    ADD CONSTRAINT alerts_severity_check CHECK (severity = 'info' OR severity = 'warning' OR severity = 'critical');
ALTER TABLE baskets DROP CONSTRAINT baskets_status_check,
    ADD CONSTRAINT baskets_status_check CHECK (status = 'open' OR status = 'frozen');
ALTER TABLE card_keys DROP CONSTRAINT card_keys_status_check,
    ADD CONSTRAINT card_keys_status_check CHECK (status = 'available' OR status = 'delivered');
ALTER TABLE notifications DROP CONSTRAINT notifications_status_check,
    ADD CONSTRAINT notifications_status_check CHECK (status = 'received' OR status = 'applied' OR status = 'ignored' OR status = 'ignored_duplicate' OR status = 'rejected');
ALTER TABLE orders DROP CONSTRAINT orders_status_check,
    ADD CONSTRAINT orders_status_check CHECK (status = 'pending_payment' OR status = 'paid' OR status = 'delivered' OR status = 'expired' OR status = 'cancelled' OR status = 'paid_after_expiry' OR status = 'refunding' OR status = 'refunded');
ALTER TABLE outbox DROP CONSTRAINT outbox_status_check,
    ADD CONSTRAINT outbox_status_check CHECK (status = 'pending' OR status = 'delivered' OR status = 'dead');
ALTER TABLE payment_attempts DROP CONSTRAINT payment_attempts_status_check,
    ADD CONSTRAINT payment_attempts_status_check CHECK (status = 'created' OR status = 'redirected' OR status = 'succeeded' OR status = 'failed' OR status = 'cancelled' OR status = 'expired' OR status = 'superseded' OR status = 'unknown');
ALTER TABLE refunds DROP CONSTRAINT refunds_kind_check,
    ADD CONSTRAINT refunds_kind_check CHECK (kind = 'merchant' OR kind = 'late_payment' OR kind = 'duplicate_payment');
ALTER TABLE refunds DROP CONSTRAINT refunds_status_check,
    ADD CONSTRAINT refunds_status_check CHECK (status = 'requested' OR status = 'processing' OR status = 'succeeded' OR status = 'failed');
ALTER TABLE reservations DROP CONSTRAINT reservations_status_check,
    ADD CONSTRAINT reservations_status_check CHECK (status = 'active' OR status = 'consumed' OR status = 'released');
ALTER TABLE sandbox_deliveries DROP CONSTRAINT sandbox_deliveries_status_check,
    ADD CONSTRAINT sandbox_deliveries_status_check CHECK (status = 'pending' OR status = 'delivered' OR status = 'dead');
ALTER TABLE sandbox_payments DROP CONSTRAINT sandbox_payments_status_check,
    ADD CONSTRAINT sandbox_payments_status_check CHECK (status = 'open' OR status = 'succeeded' OR status = 'failed' OR status = 'cancelled');
ALTER TABLE skus DROP CONSTRAINT skus_kind_check,
    ADD CONSTRAINT skus_kind_check CHECK (kind = 'physical' OR kind = 'digital');
ALTER TABLE status_events DROP CONSTRAINT status_events_entity_check,
    ADD CONSTRAINT status_events_entity_check CHECK (entity = 'order' OR entity = 'attempt' OR entity = 'refund');
DROP INDEX payment_attempts_one_active;
CREATE UNIQUE INDEX payment_attempts_one_active ON payment_attempts (order_no)
    WHERE (status = 'created' OR status = 'redirected' OR status = 'unknown');
