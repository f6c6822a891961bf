-- SQLite evaluates `x IN ('a', 'b', 'c')` with three or more constants by building a temporary
-- b-tree of the list every time the expression runs, and CHECK constraints and partial-index
-- conditions run on every insert and on every update of their column: about 3 µs a statement,
-- several statements a purchase and a payment (BENCHMARKS.md, seventh session: +18 % confirms,
-- +40 % notifications in the engine). The same conditions written as `x = 'a' OR x = 'b' OR …`
-- compare in place. This rewrites each constraint's text to that form: the conditions are
-- equivalent, so every stored row and index entry stays as it is and no table is copied (SQLite's
-- documented procedure for changing a CHECK constraint in place: https://sqlite.org/lang_altertable.html).
-- Queries that must use `payment_attempts_one_active` say its condition the same way
-- (`AttemptStatus::active_sql`).

PRAGMA writable_schema = ON;
UPDATE sqlite_schema SET sql = replace(sql, 'kind IN (''physical'', ''digital'')',
    '(kind = ''physical'' OR kind = ''digital'')')
    WHERE type = 'table' AND name = 'skus';
UPDATE sqlite_schema SET sql = replace(sql, 'status IN (''open'', ''frozen'')',
    '(status = ''open'' OR status = ''frozen'')')
    WHERE type = 'table' AND name = 'baskets';
UPDATE sqlite_schema SET sql = replace(sql, 'status IN (''pending_payment'', ''paid'', ''delivered'', ''expired'',
                          ''cancelled'', ''paid_after_expiry'', ''refunding'', ''refunded'')',
    '(status = ''pending_payment'' OR status = ''paid'' OR status = ''delivered'' OR status = ''expired'' OR status = ''cancelled'' OR status = ''paid_after_expiry'' OR status = ''refunding'' OR status = ''refunded'')')
    WHERE type = 'table' AND name = 'orders';
UPDATE sqlite_schema SET sql = replace(sql, 'status IN (''active'', ''consumed'', ''released'')',
    '(status = ''active'' OR status = ''consumed'' OR status = ''released'')')
    WHERE type = 'table' AND name = 'reservations';
UPDATE sqlite_schema SET sql = replace(sql, 'status IN (''created'', ''redirected'', ''succeeded'', ''failed'',
                       ''cancelled'', ''expired'', ''superseded'', ''unknown'')',
    '(status = ''created'' OR status = ''redirected'' OR status = ''succeeded'' OR status = ''failed'' OR status = ''cancelled'' OR status = ''expired'' OR status = ''superseded'' OR status = ''unknown'')')
    WHERE type = 'table' AND name = 'payment_attempts';
UPDATE sqlite_schema SET sql = replace(sql, 'status IN (''received'', ''applied'', ''ignored'',
                         ''ignored_duplicate'', ''rejected'')',
    '(status = ''received'' OR status = ''applied'' OR status = ''ignored'' OR status = ''ignored_duplicate'' OR status = ''rejected'')')
    WHERE type = 'table' AND name = 'notifications';
UPDATE sqlite_schema SET sql = replace(sql, 'severity IN (''info'', ''warning'', ''critical'')',
    '(severity = ''info'' OR severity = ''warning'' OR severity = ''critical'')')
    WHERE type = 'table' AND name = 'alerts';
UPDATE sqlite_schema SET sql = replace(sql, 'status IN (''open'', ''succeeded'', ''failed'', ''cancelled'')',
    '(status = ''open'' OR status = ''succeeded'' OR status = ''failed'' OR status = ''cancelled'')')
    WHERE type = 'table' AND name = 'sandbox_payments';
UPDATE sqlite_schema SET sql = replace(sql, 'status IN (''pending'', ''delivered'', ''dead'')',
    '(status = ''pending'' OR status = ''delivered'' OR status = ''dead'')')
    WHERE type = 'table' AND name = 'sandbox_deliveries';
UPDATE sqlite_schema SET sql = replace(sql, 'entity IN (''order'', ''attempt'', ''refund'')',
    '(entity = ''order'' OR entity = ''attempt'' OR entity = ''refund'')')
    WHERE type = 'table' AND name = 'status_events';
UPDATE sqlite_schema SET sql = replace(sql, 'status IN (''available'', ''delivered'')',
    '(status = ''available'' OR status = ''delivered'')')
    WHERE type = 'table' AND name = 'card_keys';
UPDATE sqlite_schema SET sql = replace(sql, 'kind IN (''merchant'', ''late_payment'', ''duplicate_payment'')',
    '(kind = ''merchant'' OR kind = ''late_payment'' OR kind = ''duplicate_payment'')')
    WHERE type = 'table' AND name = 'refunds';
UPDATE sqlite_schema SET sql = replace(sql, 'status IN (''requested'', ''processing'', ''succeeded'', ''failed'')',
    '(status = ''requested'' OR status = ''processing'' OR status = ''succeeded'' OR status = ''failed'')')
    WHERE type = 'table' AND name = 'refunds';
UPDATE sqlite_schema SET sql = replace(sql, 'status IN (''pending'', ''delivered'', ''dead'')',
    '(status = ''pending'' OR status = ''delivered'' OR status = ''dead'')')
    WHERE type = 'table' AND name = 'outbox';
UPDATE sqlite_schema SET sql = replace(sql, 'status IN (''created'', ''redirected'', ''unknown'')',
    '(status = ''created'' OR status = ''redirected'' OR status = ''unknown'')')
    WHERE type = 'index' AND name = 'payment_attempts_one_active';

-- Turn schema writing off and re-read the schema: a condition that did not parse fails here.
PRAGMA writable_schema = RESET;

-- Every list rewritten (else this migration fails and is rolled back). Creating and dropping the
-- table also moves the schema's version on, so every other open connection re-reads it.
CREATE TABLE kassa_in_list_rewrite (
    leftover TEXT CONSTRAINT every_in_list_rewritten CHECK (leftover IS NULL)
);
INSERT INTO kassa_in_list_rewrite
    SELECT group_concat(name) FROM sqlite_schema WHERE sql LIKE '% IN (''%';
DROP TABLE kassa_in_list_rewrite;
