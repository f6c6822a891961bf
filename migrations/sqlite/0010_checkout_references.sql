-- The checkout's rows reference their parents by foreign key, on both databases: a basket its
-- session, a basket line its basket and SKU, an order its session and basket, an order's lines
-- and reservations their order and SKU, a payment attempt its order. What the checks cost is in
-- BENCHMARKS.md ("What the foreign keys cost").
-- SQLite's tables declare them since they were created; this verifies that each is there, and
-- fails (rolling back) naming any that is not.
CREATE TABLE kassa_reference_check (
    missing TEXT CONSTRAINT every_reference_declared CHECK (missing IS NULL)
);
INSERT INTO kassa_reference_check
    SELECT group_concat(refs.child || '.' || refs.col) FROM (
        SELECT 'baskets' AS child, 'session_id' AS col, 'sessions' AS parent, 'id' AS parent_col
        UNION ALL SELECT 'basket_lines', 'basket_id', 'baskets', 'id'
        UNION ALL SELECT 'basket_lines', 'sku', 'skus', 'sku'
        UNION ALL SELECT 'orders', 'session_id', 'sessions', 'id'
        UNION ALL SELECT 'orders', 'basket_id', 'baskets', 'id'
        UNION ALL SELECT 'order_lines', 'order_no', 'orders', 'order_no'
        UNION ALL SELECT 'order_lines', 'sku', 'skus', 'sku'
        UNION ALL SELECT 'reservations', 'order_no', 'orders', 'order_no'
        UNION ALL SELECT 'reservations', 'sku', 'skus', 'sku'
        UNION ALL SELECT 'payment_attempts', 'order_no', 'orders', 'order_no'
    ) refs
    WHERE NOT EXISTS (
        SELECT 1 FROM pragma_foreign_key_list(refs.child) f
        WHERE f."from" = refs.col AND f."table" = refs.parent AND f."to" = refs.parent_col
    );
DROP TABLE kassa_reference_check;
