#!/usr/bin/env bash
# Builds ext4kit, makes a fresh ext4 image, mounts it through FUSE, copies
# this repository's crates/ onto it with cp -a, compares, unmounts, checks
# the image with e2fsck (when installed) and reads it back with ext4kit.
# Without root or /dev/fuse it does the same through `ext4kit mkfs -d`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p ext4kit-cli
T="${CARGO_TARGET_DIR:-target}"
E="$T/release/ext4kit"
IMG="$T/quickstart.img"
MNT="$T/quickstart-mnt"
if [ "$(id -u)" = 0 ] && [ -e /dev/fuse ]; then
    rm -f "$IMG"; mkdir -p "$MNT"
    "$E" mount "$IMG" "$MNT" --create 256M --daemon
    cp -a crates "$MNT/"
    df -h "$MNT"
    ls -l "$MNT"
    diff -r crates "$MNT/crates" && echo "the mounted copy matches the source tree"
    "$E" umount "$MNT"
else
    echo "not root or no /dev/fuse: building the image with ext4kit mkfs -d instead of mounting"
    rm -f "$IMG"
    "$E" mkfs -q -F -d crates "$IMG" 64M
fi
if command -v e2fsck >/dev/null; then e2fsck -fn "$IMG"; fi
"$E" info -H "$IMG" | head -12
"$E" ls -l "$IMG" /
"$E" stat "$IMG" /crates/engine/src/lib.rs 2>/dev/null || "$E" stat "$IMG" /engine/src/lib.rs
