\set r random(1, 100000 * :scale) * 0.5
\set aid int(:r) + 1
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
