-- The checkout's rows reference their parents by foreign key, on both databases: a basket its
-- session, a basket line its basket and SKU, an order its session and basket, an order's lines
-- and reservations their order and SKU, a payment attempt its order. What the checks cost is in
-- BENCHMARKS.md ("What the foreign keys cost").
-- A reference that is missing is added, first NOT VALID (no long lock), then validated: a row
-- whose parent is gone fails the validation, and with it this migration, naming the constraint.
DO $$
DECLARE
    r RECORD;
BEGIN
    FOR r IN SELECT * FROM (VALUES
        ('baskets', 'session_id', 'sessions', 'id'),
        ('basket_lines', 'basket_id', 'baskets', 'id'),
        ('basket_lines', 'sku', 'skus', 'sku'),
        ('orders', 'session_id', 'sessions', 'id'),
        ('orders', 'basket_id', 'baskets', 'id'),
        ('order_lines', 'order_no', 'orders', 'order_no'),
        ('order_lines', 'sku', 'skus', 'sku'),
        ('reservations', 'order_no', 'orders', 'order_no'),
        ('reservations', 'sku', 'skus', 'sku'),
        ('payment_attempts', 'order_no', 'orders', 'order_no')
    ) AS refs (child, col, parent, parent_col) LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = r.child || '_' || r.col || '_fkey') THEN
            EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I FOREIGN KEY (%I) REFERENCES %I (%I) NOT VALID',
                r.child, r.child || '_' || r.col || '_fkey', r.col, r.parent, r.parent_col);
            EXECUTE format('ALTER TABLE %I VALIDATE CONSTRAINT %I', r.child, r.child || '_' || r.col || '_fkey');
        END IF;
    END LOOP;
END
$$;
