-- A notification that fails verification is anyone's word: kassa keeps a bounded digest of it (the
-- first bytes in raw_body, the whole body's length and SHA-256 here) rather than the body, and the
-- retention worker deletes rejected rows after their time. Verified notifications keep their body.
ALTER TABLE notifications ADD COLUMN body_len BIGINT;
ALTER TABLE notifications ADD COLUMN body_sha256 TEXT;
CREATE INDEX notifications_rejected ON notifications (received_at) WHERE status = 'rejected';
