-- The periodic work (the reconciler's claims, the monitor's alerts) reaches only the rows it looks
-- for, however long the shop's history: without these each tick scanned every attempt, order or
-- refund ever made — on SQLite inside a write command, holding up every other writer meanwhile.
-- (Attempts still open need none of their own: `payment_attempts_one_active` from 0001 holds
-- exactly them, and an index of its own cost every purchase about 4 % of the engine's throughput.)
-- Attempts in `unknown`, by how long they have been (the monitor's alert):
CREATE INDEX payment_attempts_unknown ON payment_attempts (updated_at) WHERE status = 'unknown';
-- Orders paid after their expiry, whose captured attempt the reconciler re-checks:
CREATE INDEX orders_paid_after_expiry ON orders (captured_attempt_ref) WHERE status = 'paid_after_expiry';
-- Refunds the gateway is still processing, by when they may next be queried:
CREATE INDEX refunds_processing ON refunds (next_query_at) WHERE status = 'processing';
