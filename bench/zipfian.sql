\set aid random_zipfian(1, 100000 * :scale, 1.07)
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
