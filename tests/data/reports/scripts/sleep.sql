\sleep 1500 ms
SELECT 1;
