-- The open-orders limit reads a counter instead of counting: each buyer session keeps how many of
-- its orders await payment. The database keeps it, so every writer does — a previous version's
-- kassa serving beside this one during a rolling upgrade included: an order inserted as pending
-- counts (unless the confirm that placed it counted it itself with its conditional update, which
-- marks the order `open_counted`), and an order leaving pending_payment gives its place back.
ALTER TABLE sessions ADD COLUMN open_orders BIGINT NOT NULL DEFAULT 0;
ALTER TABLE orders ADD COLUMN open_counted BIGINT NOT NULL DEFAULT 0;

UPDATE sessions SET open_orders = (
    SELECT COUNT(*) FROM orders o WHERE o.session_id = sessions.id AND o.status = 'pending_payment'
) WHERE id IN (SELECT session_id FROM orders WHERE status = 'pending_payment');

CREATE FUNCTION orders_open_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        UPDATE sessions SET open_orders = open_orders + 1 WHERE id = NEW.session_id;
    ELSE
        UPDATE sessions SET open_orders = open_orders - 1 WHERE id = NEW.session_id;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER orders_open_count_insert AFTER INSERT ON orders
    FOR EACH ROW WHEN (NEW.status = 'pending_payment' AND NEW.open_counted = 0)
    EXECUTE FUNCTION orders_open_count();

CREATE TRIGGER orders_open_count_leave AFTER UPDATE OF status ON orders
    FOR EACH ROW WHEN (OLD.status = 'pending_payment' AND NEW.status <> 'pending_payment')
    EXECUTE FUNCTION orders_open_count();
