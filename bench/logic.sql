\set aid random(1, 100000 * :scale)
\set a2 (:aid * 7 + 13) % (100000 * :scale) + 1
\if :a2 > 50000
\set d 1
\else
\set d -1
\endif
SELECT abalance AS bal FROM pgbench_accounts WHERE aid = :a2 \gset
\set x :bal + :d
