-- A command's last writes go to PostgreSQL in one round trip with its COMMIT. Each of them that
-- must change a number of rows is sent inside a WITH query that calls this function when it did
-- not: the statement fails, PostgreSQL refuses the rest of the transaction, and the COMMIT rolls
-- it back. A refused confirm (a stock hold or a limit that fell short) therefore shows in the
-- server's log as this error.
CREATE FUNCTION kassa_rows_short(changed BIGINT, expected BIGINT) RETURNS BIGINT LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'KA001',
        MESSAGE = format('kassa: a statement changed %s rows where %s were expected; its transaction is rolled back', changed, expected);
END $$;
