\if :client_id = 1
SELECT * FROM no_such_table_here;
\endif
SELECT 1;
