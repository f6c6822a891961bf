-- The promotion discounts behind kassa's payments of a statement day: what the day's orders were
-- given off, beside what the gateway was asked for (a gateway sees only what it charged).
ALTER TABLE statement_days ADD COLUMN kassa_discounts_minor INTEGER NOT NULL DEFAULT 0;
