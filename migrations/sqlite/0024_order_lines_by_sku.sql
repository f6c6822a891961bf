-- The admin list's filter by SKU reads the SKU's lines newest first by order number (which leads
-- with the order's creation time) and stops at a page: a rare SKU costs what a common one does,
-- instead of every order of the history tested against it.
CREATE INDEX order_lines_by_sku ON order_lines (sku, order_no);
