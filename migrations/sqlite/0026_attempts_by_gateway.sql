-- The admin list's filter by gateway reads the gateway's attempts newest first by order number
-- (which leads with the order's creation time) and stops at a page: a rare gateway costs what a
-- common one does, instead of every order of the history tested against it.
CREATE INDEX payment_attempts_by_gateway ON payment_attempts (gateway, order_no);
