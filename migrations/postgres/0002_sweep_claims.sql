-- Sweeper claims: an instance leases a due order before closing it at the gateway, so several
-- instances never process the same order at once. A crashed instance's lease simply runs out.
ALTER TABLE orders ADD COLUMN sweep_lease_until BIGINT NOT NULL DEFAULT 0;
