-- The attempt whose capture paid the order: merchant refunds go back through it (a duplicate
-- capture on another attempt is refunded on its own).
ALTER TABLE orders ADD COLUMN captured_attempt_ref TEXT;
UPDATE orders SET captured_attempt_ref = (
    SELECT a.attempt_ref FROM payment_attempts a
    WHERE a.order_no = orders.order_no AND a.status = 'succeeded' ORDER BY a.seq LIMIT 1
) WHERE captured_minor IS NOT NULL;
