-- Operator sessions for the admin console (shared by every instance), and alert push bookkeeping.
CREATE TABLE admin_sessions (
    token_hash TEXT PRIMARY KEY,
    csrf_token TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
ALTER TABLE alerts ADD COLUMN pushed_count BIGINT NOT NULL DEFAULT 0;
