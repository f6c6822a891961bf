-- Promotions: codes that take a percentage or a fixed amount off an order or off named SKUs. A
-- promotion counts its uses (reserved by pending orders, kept by paid ones) on its own row, moved
-- by a conditional update in the confirm's transaction as stock is held, so uses never exceed
-- max_uses on any number of instances.
CREATE TABLE promotions (
    id               TEXT PRIMARY KEY,
    name             TEXT NOT NULL,
    percent_off      INTEGER CHECK (percent_off >= 1 AND percent_off <= 100),
    -- A JSON object of currency to minor units.
    amounts_off      TEXT,
    -- A JSON array of SKUs; NULL: the whole order.
    skus             TEXT,
    -- A JSON object of currency to minor units; NULL: no minimum.
    min_spend        TEXT,
    starts_at        INTEGER,
    ends_at          INTEGER,
    max_uses         INTEGER CHECK (max_uses >= 1),
    per_buyer        INTEGER CHECK (per_buyer >= 1),
    first_order_only INTEGER NOT NULL DEFAULT 0 CHECK (first_order_only = 0 OR first_order_only = 1),
    status           TEXT NOT NULL CHECK (status = 'active' OR status = 'paused' OR status = 'ended'),
    uses             INTEGER NOT NULL DEFAULT 0 CHECK (uses >= 0),
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    CHECK ((percent_off IS NULL) <> (amounts_off IS NULL)),
    CHECK (max_uses IS NULL OR uses <= max_uses)
);

-- A promotion's codes: the one the shop chose (used any number of times within the promotion's
-- limits) and the single-use codes of its batches.
CREATE TABLE promotion_codes (
    code          TEXT PRIMARY KEY,
    promotion_id  TEXT NOT NULL REFERENCES promotions (id),
    batch         TEXT,
    single_use    INTEGER NOT NULL DEFAULT 0 CHECK (single_use = 0 OR single_use = 1),
    uses          INTEGER NOT NULL DEFAULT 0 CHECK (uses >= 0),
    created_at    INTEGER NOT NULL,
    CHECK (single_use = 0 OR uses <= 1)
);
CREATE INDEX promotion_codes_by_promotion ON promotion_codes (promotion_id, batch, code);

-- Uses per buyer (the normalised contact, else the buyer session) of a promotion with a per-buyer
-- limit, moved like the promotion's own count.
CREATE TABLE promotion_buyers (
    promotion_id  TEXT NOT NULL REFERENCES promotions (id),
    buyer         TEXT NOT NULL,
    uses          INTEGER NOT NULL DEFAULT 0 CHECK (uses >= 0),
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
    buyer_counted  INTEGER NOT NULL CHECK (buyer_counted = 0 OR buyer_counted = 1),
    code_counted   INTEGER NOT NULL CHECK (code_counted = 0 OR code_counted = 1),
    status         TEXT NOT NULL CHECK (status = 'reserved' OR status = 'consumed' OR status = 'released'),
    discount_minor INTEGER NOT NULL CHECK (discount_minor > 0),
    currency       TEXT NOT NULL,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);
CREATE INDEX promotion_uses_by_promotion ON promotion_uses (promotion_id, created_at);
CREATE INDEX promotion_uses_by_code ON promotion_uses (code);

-- What an order and each of its lines got off: total_minor is the lines less the discount.
ALTER TABLE orders ADD COLUMN discount_minor INTEGER NOT NULL DEFAULT 0;
ALTER TABLE orders ADD COLUMN promotion_code TEXT;
ALTER TABLE order_lines ADD COLUMN discount_minor INTEGER NOT NULL DEFAULT 0;
-- The code a buyer put on the basket, applied at confirm.
ALTER TABLE baskets ADD COLUMN promotion_code TEXT;

-- A refund of named lines: the units of each line it pays back (what was paid for them, the
-- line's discount shared out), and whether a full refund gives the promotion's use back.
CREATE TABLE refund_lines (
    refund_no     TEXT NOT NULL REFERENCES refunds (refund_no),
    line_no       INTEGER NOT NULL,
    quantity      INTEGER NOT NULL CHECK (quantity > 0),
    amount_minor  INTEGER NOT NULL CHECK (amount_minor >= 0),
    PRIMARY KEY (refund_no, line_no)
);
ALTER TABLE refunds ADD COLUMN return_promotion INTEGER NOT NULL DEFAULT 0;

-- A use follows its order, whichever binary moves the order (as the open-orders count does): an
-- order that leaves pending_payment for expired or cancelled gives its reserved use back (the
-- promotion's count, a batch code's, the buyer's), and one that is paid keeps it. Confirm reserves
-- the use itself, by conditional updates in its own batch.
CREATE TRIGGER orders_promotion_release AFTER UPDATE OF status ON orders
    WHEN OLD.status = 'pending_payment' AND (NEW.status = 'expired' OR NEW.status = 'cancelled')
        AND NEW.promotion_code IS NOT NULL
BEGIN
    UPDATE promotions SET uses = uses - 1, updated_at = NEW.updated_at
        WHERE id = (SELECT promotion_id FROM promotion_uses WHERE order_no = NEW.order_no AND status = 'reserved');
    UPDATE promotion_codes SET uses = uses - 1
        WHERE code = (SELECT code FROM promotion_uses WHERE order_no = NEW.order_no AND status = 'reserved' AND code_counted = 1);
    UPDATE promotion_buyers SET uses = uses - 1
        WHERE promotion_id = (SELECT promotion_id FROM promotion_uses WHERE order_no = NEW.order_no AND status = 'reserved' AND buyer_counted = 1)
            AND buyer = (SELECT buyer FROM promotion_uses WHERE order_no = NEW.order_no AND status = 'reserved' AND buyer_counted = 1);
    UPDATE promotion_uses SET status = 'released', updated_at = NEW.updated_at
        WHERE order_no = NEW.order_no AND status = 'reserved';
END;

CREATE TRIGGER orders_promotion_keep AFTER UPDATE OF status ON orders
    WHEN OLD.status = 'pending_payment' AND NEW.status <> 'pending_payment' AND NEW.status <> 'expired'
        AND NEW.status <> 'cancelled' AND NEW.promotion_code IS NOT NULL
BEGIN
    UPDATE promotion_uses SET status = 'consumed', updated_at = NEW.updated_at
        WHERE order_no = NEW.order_no AND status = 'reserved';
END;
