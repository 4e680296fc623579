#!/usr/bin/env bash
# fuzz/make-seed.sh — write the seed corpus of the `open_and_walk` fuzz target.
#
# Usage: fuzz/make-seed.sh [OUTDIR [BLOCKDIR]]
#   OUTDIR   images, default fuzz/corpus/open_and_walk
#   BLOCKDIR their non-zero blocks, default fuzz/corpus/format_parsers
#
# Builds one small source tree (regular files, a sparse file, a file spanning
# many blocks, fast and slow symlinks, a hard link, a directory big enough to
# be indexed, a FIFO, xattrs where the host file system takes them) and
# formats it with mkfs.ext2/3/4 -d under several feature sets, each image a
# few hundred KiB (the journalled ones 3 MiB, the smallest a journal can
# be), then lets e2fsck -fD index the big directory. The images are the seeds: the fuzz input *is* the image. UUIDs, hash
# seeds and times are fixed so that the seeds are reproducible.
#
# Needs e2fsprogs >= 1.43 (mkfs -d). The corpus directory is gitignored;
# rerun this script after a fresh checkout before fuzzing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/corpus/open_and_walk}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

export E2FSPROGS_FAKE_TIME=1700000000
src=$work/tree
mkdir -p "$src/dir/sub" "$src/big" "$src/empty"
printf 'hello\n' >"$src/hello.txt"
head -c 3000 /dev/zero | tr '\0' 'x' >"$src/dir/three-blocks"
seq 1 4000 >"$src/dir/sub/numbers" # ~19 KiB: many blocks, one extent
truncate -s 40K "$src/sparse"
printf 'middle' | dd of="$src/sparse" bs=1 seek=20000 conv=notrunc status=none
ln -s hello.txt "$src/fast-link"
ln -s "$(printf 'long/%.0s' $(seq 1 20))target" "$src/slow-link"
ln "$src/hello.txt" "$src/dir/hard-link"
mkfifo "$src/fifo"
# 60 names of 24 bytes: more than two 1 KiB blocks, so mkfs builds an htree.
# All are hard links to one inode, which keeps the inode count small.
: >"$src/big/entry-with-a-long-name-01"
for i in $(seq -w 2 60); do
    ln "$src/big/entry-with-a-long-name-01" "$src/big/entry-with-a-long-name-$i"
done
if setfattr -n user.comment -v 'seed xattr' "$src/hello.txt" 2>/dev/null; then
    setfattr -n user.big -v "$(head -c 300 /dev/zero | tr '\0' 'v')" "$src/dir" || true
fi
touch -d '@1600000000' "$src" "$src"/* "$src"/*/* 2>/dev/null || true

uuid=6a5f0d8c-3c1e-4b9e-9a57-2f1de0c0ffee
seed_opts=(-q -F -U "$uuid" -E hash_seed=0c0ffee0-1234-5678-9abc-def012345678 -d "$src")

# name  mkfs  size  options…
make() {
    local name=$1 mkfs=$2 size=$3
    shift 3
    local img=$work/$name.img
    rm -f "$img"
    if "$mkfs" "${seed_opts[@]}" "$@" "$img" "$size" >"$work/log" 2>&1; then
        # mkfs -d never indexes directories; e2fsck -D builds the htrees.
        e2fsck -fyD "$img" >/dev/null 2>&1 || true
        cp "$img" "$out/$name"
        echo "seed $name: $(stat -c %s "$img") bytes ($mkfs $*)"
    else
        echo "seed $name: skipped, $mkfs $* failed: $(tail -n 2 "$work/log")" >&2
    fi
}

make ext4-1k mkfs.ext4 256K -b 1024 -N 64 -O ^has_journal
make ext4-4k-csum mkfs.ext4 512K -b 4096 -N 64 -O ^has_journal,64bit,metadata_csum
make ext4-inline mkfs.ext4 256K -b 1024 -N 64 -I 256 -O ^has_journal,inline_data
make ext4-metabg mkfs.ext4 384K -b 1024 -N 64 -g 1024 -O ^has_journal,^resize_inode,meta_bg
make ext4-128 mkfs.ext4 256K -b 1024 -N 64 -I 128 -O ^has_journal,^metadata_csum,uninit_bg
make ext2 mkfs.ext2 256K -b 1024 -N 64
make ext3-journal mkfs.ext3 3M -b 1024 -N 64 -J size=1
make ext4-journal-csum mkfs.ext4 3M -b 1024 -N 64 -J size=1 -O metadata_csum
echo "corpus: $out"

# format_parsers: every distinct non-zero block of some seeds (superblocks,
# descriptors, inode tables, extent and directory blocks, htree roots, xattr
# blocks, journal superblock), each its own input.
blocks=${2:-$here/corpus/format_parsers}
mkdir -p "$blocks"
split_blocks() { # image block_size
    local img=$1 bs=$2 n i
    [ -f "$img" ] || return 0
    n=$(($(stat -c %s "$img") / bs))
    for ((i = 0; i < n; i++)); do
        dd if="$img" bs="$bs" skip="$i" count=1 status=none >"$work/blk"
        if tr -d '\0' <"$work/blk" | head -c 1 | grep -q .; then
            cp "$work/blk" "$blocks/$(sha1sum "$work/blk" | cut -c1-16)"
        fi
    done
}
split_blocks "$out/ext4-1k" 1024
split_blocks "$out/ext4-inline" 1024
split_blocks "$out/ext4-4k-csum" 4096
split_blocks "$out/ext4-journal-csum" 1024
echo "corpus: $blocks ($(ls "$blocks" | wc -l) blocks)"
