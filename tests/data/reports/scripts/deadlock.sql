\set a random(1, 2)
\set b random(1, 2)
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :a;
SELECT pg_sleep(0.005);
UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :b;
END;
