#!/usr/bin/env bash
# The test command (README, "Tests"): says which tools the tests use are
# missing and how to install them, runs `cargo test --workspace` (arguments
# pass through; with `-p CRATE` only that crate: `scripts/test.sh -p
# ext4kit-fsck`), and ends with every test that skipped and why. Under CI
# (CI set) a skip fails the run.
# `scripts/test.sh --packages` prints the Debian packages the tests use.
set -uo pipefail
cd "$(dirname "$0")/.."

# e2fsprogs: the oracles (mkfs.ext4, e2fsck, debugfs, dumpe2fs); attr:
# setfattr/getfattr; bzip2: some e2fsprogs test images; util-linux:
# mount/losetup/fallocate/swapon; fuse3 (fusermount3) and fuse2fs (the
# benchmark peer) for the FUSE mount; acl (setfacl), fio and stress-ng as
# independent checkers on it; git, make, gcc and tar for the real-program
# tests on the mount; fonts-dejavu-core for the text of benchmark plots;
# time (GNU) for bench fsck's peak RSS; python3 maps files (mmap with
# O_DIRECT) and sets fscrypt keys and policies on kernel mounts (ioctls)
# where Rust would need `unsafe`; fsverity cross-checks `ext4kit
# verity digest`; python3-cryptography derives the casefold+encryption
# dirhash key (HKDF-SHA512) independently of the engine; nbdkit (memory,
# file, delay and error plugins/filters) and qemu-utils (qemu-nbd) are the
# real servers the NBD client is tested against; openssl makes the X.509
# credentials of the NBD-over-TLS tests.
PACKAGES="e2fsprogs attr bzip2 util-linux kmod fuse3 fuse2fs acl fio stress-ng fonts-dejavu-core git make gcc tar time python3 fsverity python3-cryptography nbdkit qemu-utils openssl"
TOOLS="mkfs.ext4 e2fsck debugfs dumpe2fs setfattr bzip2 mount losetup swapon fusermount3 fuse2fs setfacl fio stress-ng git make gcc tar python3 nbdkit qemu-nbd openssl"

if [ "${1:-}" = --packages ]; then
    echo "$PACKAGES"
    exit 0
fi
missing=""
for tool in $TOOLS; do
    command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
[ -x /usr/bin/time ] || missing="$missing /usr/bin/time"
if [ -n "$missing" ]; then
    echo "test.sh: missing:$missing; the tests that need them will skip. Install with:"
    echo "  apt-get install $PACKAGES"
fi
if [ "$(id -u)" != 0 ] || [ ! -e /dev/fuse ]; then
    echo "test.sh: not root, or no /dev/fuse: the loop-mount and FUSE tests will skip"
fi

skips=$(mktemp)
trap 'rm -f "$skips"' EXIT
export EXT4KIT_SKIP_LOG="$skips"
scope=--workspace
for arg in "$@"; do
    case "$arg" in -p | --package | --package=* | -p?*) scope= ;; esac
done
cargo test $scope "$@"
status=$?
# The whole run mounts with transport=auto: FUSE over io_uring where the
# kernel offers it (root turns it on: .ci/run does), /dev/fuse otherwise.
# The mount tests then run on the other transport too: /dev/fuse when
# the first pass was on io_uring; io_uring where it is off is a loud skip.
if [ -n "$scope" ]; then
    enable=/sys/module/fuse/parameters/enable_uring
    # --workspace as above: `-p` would resolve features anew and rebuild
    # half the tree.
    if [ "$(cat "$enable" 2>/dev/null)" = Y ]; then
        echo "test.sh: the mount tests again with transport=dev"
        EXT4KIT_TEST_TRANSPORT=dev cargo test --workspace --test 'mount*' --test fuse_mount || status=1
    else
        echo "test.sh: mount tests over io_uring: $enable is not Y" >>"$skips"
    fi
fi
count=$(wc -l <"$skips")
if [ "$count" -gt 0 ]; then
    echo "test.sh: $count skipped (test: reason):"
    sort "$skips" | sed 's/^/  /'
    if [ -n "${CI:-}" ] && [ "$status" = 0 ]; then
        echo "test.sh: under CI nothing may skip"
        status=1
    fi
else
    echo "test.sh: nothing skipped"
fi
exit "$status"
