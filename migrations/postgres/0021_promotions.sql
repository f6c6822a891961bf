-- Promotions: codes that take a percentage or a fixed amount off an order or off named SKUs. A
-- promotion counts its uses (reserved by pending orders, kept by paid ones) on its own row, moved
-- by a conditional update in the confirm's transaction as stock is held, so uses never exceed
-- max_uses on any number of instances.
CREATE TABLE promotions (
    id               TEXT PRIMARY KEY,
    name             TEXT NOT NULL,
    percent_off      BIGINT CHECK (percent_off >= 1 AND percent_off <= 100),
    -- A JSON object of currency to minor units.
    amounts_off      TEXT,
    -- A JSON array of SKUs; NULL: the whole order.
    skus             TEXT,
    -- A JSON object of currency to minor units; NULL: no minimum.
    min_spend        TEXT,
    starts_at        BIGINT,
    ends_at          BIGINT,
    max_uses         BIGINT CHECK (max_uses >= 1),
    per_buyer        BIGINT CHECK (per_buyer >= 1),
    first_order_only BIGINT NOT NULL DEFAULT 0 CHECK (first_order_only = 0 OR first_order_only = 1),
    status           TEXT NOT NULL CHECK (status = 'active' OR status = 'paused' OR status = 'ended'),
    uses             BIGINT NOT NULL DEFAULT 0 CHECK (uses >= 0),
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    CHECK ((percent_off IS NULL) <> (amounts_off IS NULL)),
    CHECK (max_uses IS NULL OR uses <= max_uses)
);

-- A promotion's codes: the one the shop chose (used any number of times within the promotion's
-- limits) and the single-use codes of its batches.
CREATE TABLE promotion_codes (
    code          TEXT PRIMARY KEY,
    promotion_id  TEXT NOT NULL REFERENCES promotions (id),
    batch         TEXT,
    single_use    BIGINT NOT NULL DEFAULT 0 CHECK (single_use = 0 OR single_use = 1),
    uses          BIGINT NOT NULL DEFAULT 0 CHECK (uses >= 0),
    created_at    BIGINT NOT NULL,
    CHECK (single_use = 0 OR uses <= 1)
);
CREATE INDEX promotion_codes_by_promotion ON promotion_codes (promotion_id, batch, code);

-- Uses per buyer (the normalised contact, else the buyer session) of a promotion with a per-buyer
-- limit, moved like the promotion's own count.
CREATE TABLE promotion_buyers (
    promotion_id  TEXT NOT NULL REFERENCES promotions (id),
    buyer         TEXT NOT NULL,
    uses          BIGINT NOT NULL DEFAULT 0 CHECK (uses >= 0),
    PRIMARY KEY (promotion_id, buyer)
);

-- An order's use of a code: reserved at confirm, consumed with its payment, released when the
-- order expires or is cancelled (or a full refund gives it back). What the counts above count.
-- Its promotion is its code's (the code's foreign key leads to it); promotion_id is kept beside
-- for the counts and not checked against the promotion's row a second time: that row is the one
-- every confirm of a flash sale updates, and each check would take a key-share lock on it
-- (kassa check's P4 compares the two).
CREATE TABLE promotion_uses (
    order_no       TEXT PRIMARY KEY REFERENCES orders (order_no),
    promotion_id   TEXT NOT NULL,
    code           TEXT NOT NULL REFERENCES promotion_codes (code),
    buyer          TEXT NOT NULL,
    buyer_counted  BIGINT NOT NULL CHECK (buyer_counted = 0 OR buyer_counted = 1),
    code_counted   BIGINT NOT NULL CHECK (code_counted = 0 OR code_counted = 1),
    status         TEXT NOT NULL CHECK (status = 'reserved' OR status = 'consumed' OR status = 'released'),
    discount_minor BIGINT NOT NULL CHECK (discount_minor > 0),
    currency       TEXT NOT NULL,
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL
);
CREATE INDEX promotion_uses_by_promotion ON promotion_uses (promotion_id, created_at);
CREATE INDEX promotion_uses_by_code ON promotion_uses (code);

-- What an order and each of its lines got off: total_minor is the lines less the discount.
ALTER TABLE orders ADD COLUMN discount_minor BIGINT NOT NULL DEFAULT 0;
ALTER TABLE orders ADD COLUMN promotion_code TEXT;
ALTER TABLE order_lines ADD COLUMN discount_minor BIGINT NOT NULL DEFAULT 0;
-- The code a buyer put on the basket, applied at confirm.
ALTER TABLE baskets ADD COLUMN promotion_code TEXT;

-- A refund of named lines: the units of each line it pays back (what was paid for them, the
-- line's discount shared out), and whether a full refund gives the promotion's use back.
CREATE TABLE refund_lines (
    refund_no     TEXT NOT NULL REFERENCES refunds (refund_no),
    line_no       BIGINT NOT NULL,
    quantity      BIGINT NOT NULL CHECK (quantity > 0),
    amount_minor  BIGINT NOT NULL CHECK (amount_minor >= 0),
    PRIMARY KEY (refund_no, line_no)
);
ALTER TABLE refunds ADD COLUMN return_promotion BIGINT NOT NULL DEFAULT 0;

-- A use follows its order, whichever binary moves the order (as the open-orders count does): an
-- order that leaves pending_payment for expired or cancelled gives its reserved use back (the
-- promotion's count, a batch code's, the buyer's), and one that is paid keeps it. Confirm reserves
-- the use itself, by conditional updates in its own batch. Named to fire after the open-orders
-- count's trigger, so an order's session is locked before its promotion, as confirm locks them.
CREATE FUNCTION orders_promotion_use() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    u promotion_uses%ROWTYPE;
BEGIN
    SELECT * INTO u FROM promotion_uses WHERE order_no = NEW.order_no AND status = 'reserved';
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF NEW.status = 'expired' OR NEW.status = 'cancelled' THEN
        UPDATE promotions SET uses = uses - 1, updated_at = NEW.updated_at WHERE id = u.promotion_id;
        IF u.code_counted = 1 THEN
            UPDATE promotion_codes SET uses = uses - 1 WHERE code = u.code;
        END IF;
        IF u.buyer_counted = 1 THEN
            UPDATE promotion_buyers SET uses = uses - 1 WHERE promotion_id = u.promotion_id AND buyer = u.buyer;
        END IF;
        UPDATE promotion_uses SET status = 'released', updated_at = NEW.updated_at WHERE order_no = NEW.order_no;
    ELSE
        UPDATE promotion_uses SET status = 'consumed', updated_at = NEW.updated_at WHERE order_no = NEW.order_no;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER orders_promotion_use AFTER UPDATE OF status ON orders
    FOR EACH ROW WHEN (OLD.status = 'pending_payment' AND NEW.status <> 'pending_payment' AND NEW.promotion_code IS NOT NULL)
    EXECUTE FUNCTION orders_promotion_use();
