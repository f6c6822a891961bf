-- What grows with every purchase and is needed only for a while: webhook messages delivered long
-- ago and idempotency keys past their window are pruned by the retention worker, oldest first, in
-- small batches. These indexes let it find them without reading what it keeps.
CREATE INDEX outbox_delivered_by_time ON outbox (delivered_at) WHERE status = 'delivered';
CREATE INDEX idempotency_keys_by_creation ON idempotency_keys (created_at);

-- The admin order list filtered by status reads a page by index however long the shop's history
-- is (without it a status few orders have is found by reading every order newest first).
CREATE INDEX orders_by_status ON orders (status, created_at, order_no);
