-- The references between the checkout's rows are kept by the commands that write them, and
-- verified by `kassa check`, rather than by foreign keys. Each of these rows goes in inside the
-- transaction that reads or writes its parent, under that parent's lock (DESIGN.md §4's lock
-- order: basket, stock rows, order), and kassa never deletes a session, a SKU, a basket with
-- lines, or an order:
--   - a basket goes in for the session that asked (its cookie was read a moment before);
--   - a basket line goes in with its basket, priced by an INSERT … SELECT from its SKU's row;
--   - an order goes in under its basket's lock, with its lines, reservations and first attempt,
--     each line's stock held by a conditional UPDATE of its SKU's row in the same transaction;
--   - a later attempt goes in under its order's lock.
-- A foreign-key check is a query of its own per reference, with a share lock on the parent row
-- (on a hot SKU, one more locker of the row every buyer updates): ten per checkout, 13 % of
-- PostgreSQL's CPU in the checkout benchmark; without them the checkout ran 1,111 → 1,327/s, the
-- medians of eight alternated pairs (BENCHMARKS.md, fifteenth session). `kassa check` reports any row whose parent is missing
-- ("refs"). SQLite keeps the foreign keys: there each check is a lookup in the writer's own
-- connection, with no lock and no query of its own. The references of refunds, card keys and
-- the other tables stay.
ALTER TABLE baskets DROP CONSTRAINT IF EXISTS baskets_session_id_fkey;
ALTER TABLE basket_lines DROP CONSTRAINT IF EXISTS basket_lines_basket_id_fkey;
ALTER TABLE basket_lines DROP CONSTRAINT IF EXISTS basket_lines_sku_fkey;
ALTER TABLE orders DROP CONSTRAINT IF EXISTS orders_session_id_fkey;
ALTER TABLE orders DROP CONSTRAINT IF EXISTS orders_basket_id_fkey;
ALTER TABLE order_lines DROP CONSTRAINT IF EXISTS order_lines_order_no_fkey;
ALTER TABLE order_lines DROP CONSTRAINT IF EXISTS order_lines_sku_fkey;
ALTER TABLE reservations DROP CONSTRAINT IF EXISTS reservations_order_no_fkey;
ALTER TABLE reservations DROP CONSTRAINT IF EXISTS reservations_sku_fkey;
ALTER TABLE payment_attempts DROP CONSTRAINT IF EXISTS payment_attempts_order_no_fkey;
