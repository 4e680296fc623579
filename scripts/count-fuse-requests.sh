#!/bin/bash
# count-fuse-requests.sh MOUNTPOINT COMMAND [ARGS…]
# Runs COMMAND and prints how many FUSE requests of each kind the kernel
# sent to the FUSE mount at MOUNTPOINT meanwhile (root; the kernel's
# fuse/fuse_request_send tracepoint, in a tracing instance of its own so
# other tracing users are not disturbed). Used for docs/fuse-requests.md.
set -euo pipefail
mnt=$(realpath "$1"); shift
T=/sys/kernel/tracing
[ -d $T/events/fuse ] || { echo "no fuse tracepoints: mount -t tracefs nodev $T" >&2; exit 2; }
minor=$(awk -v m="$mnt" '$5 == m {split($3, d, ":"); print d[2]}' /proc/self/mountinfo | tail -1)
[ -n "$minor" ] || { echo "$mnt is not a mount point" >&2; exit 2; }
inst=$T/instances/count-fuse-$$
mkdir "$inst"
trap 'echo 0 > "$inst/events/fuse/fuse_request_send/enable"; rmdir "$inst"' EXIT
echo 262144 > "$inst/buffer_size_kb"
echo "connection == $minor" > "$inst/events/fuse/fuse_request_send/filter"
echo 1 > "$inst/events/fuse/fuse_request_send/enable"
"$@"
echo 0 > "$inst/events/fuse/fuse_request_send/enable"
grep -o '(FUSE_[A-Z_0-9]*)' "$inst/trace" | tr -d '()' | sort | uniq -c | sort -rn || true
lost=$(awk '/overrun/ {s += $2} END {print s + 0}' "$inst"/per_cpu/cpu*/stats)
echo "total $(grep -c 'FUSE_' "$inst/trace" || true) (lost to overrun: $lost)"
