#!/usr/bin/env bash
# Builds ext4kit, makes a small ext4 image of this repository's sources with
# `ext4kit mkfs -d`, and reads it back with ext4kit: info, ls, cat, stat, export.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p ext4kit-cli
E=target/release/ext4kit
IMG=target/quickstart.img
OUT=target/quickstart-export
rm -f "$IMG"; rm -rf "$OUT"
$E mkfs -q -F -d crates "$IMG" 64M
$E info -H "$IMG" | head -20
echo "--- ls -l /"
$E ls -l "$IMG" /
echo "--- cat /engine/Cargo.toml"
$E cat "$IMG" /engine/Cargo.toml | head -5
echo "--- stat /engine/src/lib.rs"
$E stat "$IMG" /engine/src/lib.rs
$E export "$IMG" / "$OUT"
diff -r crates "$OUT" --exclude=lost+found && echo "export matches the source tree"
