-- Disputes in a statement day's totals, each side's, apart from payments and refunds: what
-- disputes took from the balance (their withdrawals), what they gave back (their reinstatements,
-- a dispute won) and the dispute fees, apart from the disputed amounts.
ALTER TABLE statement_days ADD COLUMN gateway_disputes_minor BIGINT NOT NULL DEFAULT 0;
ALTER TABLE statement_days ADD COLUMN gateway_reinstated_minor BIGINT NOT NULL DEFAULT 0;
ALTER TABLE statement_days ADD COLUMN gateway_dispute_fees_minor BIGINT NOT NULL DEFAULT 0;
ALTER TABLE statement_days ADD COLUMN kassa_disputes_minor BIGINT NOT NULL DEFAULT 0;
ALTER TABLE statement_days ADD COLUMN kassa_reinstated_minor BIGINT NOT NULL DEFAULT 0;
ALTER TABLE statement_days ADD COLUMN kassa_dispute_fees_minor BIGINT NOT NULL DEFAULT 0;
