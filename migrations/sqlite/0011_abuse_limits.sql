-- Limits against stock hoarding and guessing, and what retention prunes.
-- A SKU may cap the units one order takes and hold its stock for less than the shop's default.
ALTER TABLE skus ADD COLUMN max_per_order BIGINT CHECK (max_per_order IS NULL OR max_per_order > 0);
ALTER TABLE skus ADD COLUMN hold_seconds BIGINT CHECK (hold_seconds IS NULL OR (hold_seconds > 0 AND hold_seconds <= 604800));

-- Failed admin sign-ins per client address, shared by every instance: after too many in a window
-- the address is locked out until locked_until.
CREATE TABLE signin_failures (
    address           TEXT PRIMARY KEY,
    failures          BIGINT NOT NULL CHECK (failures >= 0),
    window_started_at BIGINT NOT NULL,
    locked_until      BIGINT
);

-- Retention: a notification's raw body is emptied after its retention age; the decision record stays.
ALTER TABLE notifications ADD COLUMN body_pruned_at BIGINT;
CREATE INDEX notifications_unpruned_by_arrival ON notifications (received_at) WHERE body_pruned_at IS NULL;
CREATE INDEX baskets_open_by_update ON baskets (updated_at) WHERE status = 'open';
CREATE INDEX sessions_by_creation ON sessions (created_at);
