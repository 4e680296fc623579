#!/bin/sh
# The long crash run of issue 5: the crash test's workload with SEEDS
# different seeds, POINTS random crash points each (default 100 x 1000 =
# 100,000 points) and half as many for the two-writer workload, two seeds
# at a time. Prints one line per seed and a
# total; exits non-zero if any crash point failed (the failing seed and
# points are in the log it names).
#   scripts/crash-soak.sh [SEEDS] [POINTS] [FIRST_SEED]
set -eu
seeds=${1:-100}
points=${2:-1000}
first=${3:-1}
cd "$(dirname "$0")/.."
bin=$(cargo test -q -p ext4kit-engine --test crash --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
[ -x "$bin" ] || { echo "crash-soak: cannot build the crash test" >&2; exit 2; }
log=$(mktemp /tmp/crash-soak.XXXXXX)
run_seed() {
    if EXT4KIT_CRASH_SEED=$1 EXT4KIT_CRASH_POINTS=$points "$bin" crash_anywhere >"$log.$1" 2>&1; then
        echo "seed $1: $points + $((points / 2)) two-writer points ok"
    else
        echo "seed $1: FAILED (see $log.$1)"
        touch "$log.failed.$1"
    fi
}
start=$(date +%s)
s=$first
last=$((first + seeds - 1))
while [ "$s" -le "$last" ]; do
    run_seed "$s" &
    if [ $((s + 1)) -le "$last" ]; then run_seed $((s + 1)) & fi
    wait
    s=$((s + 2))
done
failed=$(find "$(dirname "$log")" -name "$(basename "$log").failed.*" | wc -l)
echo "crash-soak: $((seeds * points)) + $((seeds * (points / 2))) two-writer crash points over $seeds seeds in $(( $(date +%s) - start )) s; failing seeds: $failed"
[ "$failed" -eq 0 ]
