-- The shop's own data on an order: its reference (unique among orders that have one), its
-- metadata (a JSON object of strings), and where its buyer is sent back to after paying or giving
-- up; how many times an operator sent a webhook message again; orders listed newest first.
-- Additive only: a previous version's kassa serving beside this one writes none of it.
ALTER TABLE orders ADD COLUMN merchant_reference TEXT;
ALTER TABLE orders ADD COLUMN metadata TEXT;
ALTER TABLE orders ADD COLUMN return_url TEXT;
ALTER TABLE orders ADD COLUMN cancel_url TEXT;
CREATE UNIQUE INDEX orders_by_merchant_reference ON orders (merchant_reference) WHERE merchant_reference IS NOT NULL;
CREATE INDEX orders_by_created ON orders (created_at, order_no);
ALTER TABLE outbox ADD COLUMN resends BIGINT NOT NULL DEFAULT 0;
