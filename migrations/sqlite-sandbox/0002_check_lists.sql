-- The sandbox's status checks as comparisons rather than IN lists, as kassa's own
-- (migrations/sqlite/0009_check_lists.sql, which explains why).

PRAGMA writable_schema = ON;
UPDATE sqlite_schema SET sql = replace(sql, 'status IN (''open'', ''succeeded'', ''failed'', ''cancelled'')',
    '(status = ''open'' OR status = ''succeeded'' OR status = ''failed'' OR status = ''cancelled'')')
    WHERE type = 'table' AND name = 'sandbox_payments';
UPDATE sqlite_schema SET sql = replace(sql, 'status IN (''pending'', ''delivered'', ''dead'')',
    '(status = ''pending'' OR status = ''delivered'' OR status = ''dead'')')
    WHERE type = 'table' AND name = 'sandbox_deliveries';

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
