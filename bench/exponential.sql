\set aid random_exponential(1, 100000 * :scale, 4.0)
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
