#!/bin/sh
# Regenerate the golden pgbench 18.6 outputs used by tests/unit/test_report_text.py
# and tests/unit/test_progress.py. Needs the reference pgbench and a server:
#   PGHOST=/tmp/pgdev PGUSER=postgres sh capture.sh DBNAME PARTITIONED_DBNAME
# DBNAME must hold `pgbench -i -s 1` tables, PARTITIONED_DBNAME
# `pgbench -i -s 1 --partitions 3 --partition-method hash`.
# Each case NAME gets NAME.args (the arguments), NAME.txt (stdout) and
# NAME.stderr; run from this directory so script paths print relative.
set -u
DB=$1
PDB=$2
PGBENCH=${PGBENCH:-pgbench}
cd "$(dirname "$0")"
run() {
    name=$1; db=$2; shift 2
    echo "$*" > "$name.args"
    "$PGBENCH" "$@" "$db" > "$name.txt" 2> "$name.stderr"
    echo "$name: exit $?"
}
run t10 "$DB" -t 10
run t10_c4_j2 "$DB" -t 10 -c 4 -j 2
run time_progress "$DB" -T 2 -P 1 -c 2
run progress_t "$DB" -t 2000 -P 1 -S -c 2
run rate_limit "$DB" -R 50 -L 5 -T 2 -P 1
run rate_only "$DB" -R 100 -T 3 -c 2 -j 2 -P 1
run limit_only "$DB" -L 0.5 -T 1 -S
run connect "$DB" -C -t 5 -c 2
run per_command "$DB" -r -t 20
run per_command_prepared "$DB" -r -t 20 -M prepared -N
run two_scripts "$DB" -b simple-update@2 -b select-only@1 -t 20 -c 2
run two_scripts_r "$DB" -b tpcb@3 -f scripts/select.sql@1 -r -t 10 -c 2 --max-tries 2
run max_tries3 "$DB" --max-tries 3 -T 2 -S
run max_tries0 "$DB" --max-tries 0 -T 1 -S
run failures_detailed "$DB" --failures-detailed -t 10 -M extended
run serial "$DB" -f scripts/serial.sql -c 8 -j 2 -T 2 --failures-detailed -r -n
run serial_retry "$DB" -f scripts/serial.sql -c 8 -T 2 --max-tries 4 -P 1 -n
run deadlock "$DB" -f scripts/deadlock.sql -c 4 -T 3 --failures-detailed -r -n
run two_scripts_fail "$DB" -f scripts/serial.sql@1 -b select-only@1 -c 6 -T 2 --failures-detailed --max-tries 2 -r -n
run two_scripts_rate "$DB" -b select-only@1 -b simple-update@1 -R 400 -L 20 -T 2 -c 2 -n
run zero_weight "$DB" -b select-only@1 -b simple-update@0 -t 10 -n
run all_skipped "$DB" -R 1000000 -L 0.001 -t 3 -S -n
run all_skipped_two_scripts "$DB" -R 1000000 -L 0.001 -t 3 -b select-only -b simple-update -n
run serial_connect "$DB" -f scripts/serial.sql -c 4 -T 1 -C --max-tries 2 -n
run logged "$DB" -l --log-prefix=/tmp/pgsurge_capture_log -t 5 -S -n
run aborted_partial "$DB" -f scripts/partial.sql -t 5 -c 2 -n -r
run custom_scale "$DB" -f scripts/select.sql -s 7 -t 5 -n
run aborted "$DB" -f scripts/broken.sql -t 3 -c 2 -n
run partitioned "$PDB" -T 2 -S -c 2 --progress-timestamp -P 1
run skipped_many "$DB" -R 5000 -L 0.05 -T 2 -S -n -P 1 --max-tries 0
run progress_idle "$DB" -f scripts/sleep.sql -T 4 -P 1 -n
rm -f /tmp/pgsurge_capture_log.*
