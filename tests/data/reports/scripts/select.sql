-- a custom script with meta-commands
\set aid random(1, 100000 * :scale)
\sleep 1 ms
SELECT abalance FROM pgbench_accounts
  WHERE aid = :aid;
