#!/usr/bin/env bash
# fuzz/make-seed.sh — write the seed corpora of the fuzz targets.
#
# Usage: fuzz/make-seed.sh [OUTDIR [BLOCKDIR [REPLAYDIR [FSCKDIR]]]]
#   OUTDIR    images, default fuzz/corpus/open_and_walk
#   BLOCKDIR  their non-zero blocks, default fuzz/corpus/format_parsers
#   REPLAYDIR images with dirty journals, default fuzz/corpus/journal_replay
#   FSCKDIR   those and damaged images, default fuzz/corpus/fsck
#
# Environment: E2FSPROGS_TESTS, the `tests` directory of e2fsprogs' source
# (or the project's copy of its images; default ../shared/peer-data/
# e2fsprogs-tests next to the repository, skipped when absent);
# SEED_MAX_BYTES, the largest image taken from it (default 3 MiB: pass the
# same number as -max_len, longer inputs are cut and then fail to open).
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

replay=${3:-$here/corpus/journal_replay}
fsck=${4:-$here/corpus/fsck}
max=${SEED_MAX_BYTES:-3145728}
mkdir -p "$replay" "$fsck"

# Dirty journals written by debugfs (its `jo`/`jw`/`jc` journal commands,
# as e2fsprogs' j_short_* tests use them) on 3 MiB images with a 1 MiB
# journal: the block and inode bitmaps logged as zeroes, once committed,
# once with the commit block left out (`needs_recovery` then set by hand),
# once revoked by a later transaction, once with journal checksums (v3);
# the root directory's block logged with its own contents, an inode-table
# block with zeroes.
jseed() { # name mkfs options… -- debugfs commands (@BITMAPS@ @ROOT@ @ITABLE@ @ROOTBLK@)
    local name=$1 mkfs=$2
    shift 2
    local opts=()
    while [ "$1" != -- ]; do opts+=("$1"); shift; done
    shift
    local img=$work/$name.img
    rm -f "$img"
    if ! "$mkfs" "${seed_opts[@]}" "${opts[@]}" "$img" 3M >"$work/log" 2>&1; then
        echo "seed $name: skipped, $mkfs ${opts[*]} failed: $(tail -n 2 "$work/log")" >&2
        return 0
    fi
    local bitmaps root itable
    bitmaps=$(dumpe2fs "$img" 2>/dev/null | sed -n 's/^.*bitmap at \([0-9]*\).*$/\1/p' | tr '\n' ',' | sed 's/,$//')
    root=$(debugfs -R 'bmap <2> 0' "$img" 2>/dev/null)
    itable=$(dumpe2fs "$img" 2>/dev/null | sed -n 's/^ *Inode table at \([0-9]*\).*$/\1/p' | head -n 1)
    dd if="$img" of="$work/root.blk" bs=1024 skip="$root" count=1 status=none
    local cmd
    : >"$work/cmd"
    for cmd in "$@"; do
        cmd=${cmd//@BITMAPS@/$bitmaps}
        cmd=${cmd//@ROOT@/$root}
        cmd=${cmd//@ITABLE@/$itable}
        cmd=${cmd//@ROOTBLK@/$work/root.blk}
        echo "$cmd" >>"$work/cmd"
    done
    debugfs -w -f "$work/cmd" "$img" >"$work/log" 2>&1 || true
    if dumpe2fs -h "$img" 2>/dev/null | grep -q needs_recovery; then
        cp "$img" "$replay/$name"
        cp "$img" "$fsck/$name"
        echo "seed $name: $(stat -c %s "$img") bytes, dirty journal"
    else
        echo "seed $name: skipped, debugfs left no dirty journal: $(tail -n 2 "$work/log")" >&2
    fi
}
j3=(mkfs.ext3 -b 1024 -N 64 -J size=1)
j4=(mkfs.ext4 -b 1024 -N 64 -J size=1 -O metadata_csum)
j4c=(mkfs.ext4 -b 1024 -N 64 -J size=1 -O 64bit,metadata_csum)
jseed j3-zero-bitmaps "${j3[@]}" -- jo "jw -b @BITMAPS@ /dev/zero" jc
jseed j3-uncommitted "${j3[@]}" -- jo "jw -b @BITMAPS@ -c /dev/zero" jc "feature needs_recovery"
jseed j3-revoked "${j3[@]}" -- jo "jw -b @BITMAPS@ /dev/zero" jc jo "jw -r @BITMAPS@" jc
jseed j3-root-itable "${j3[@]}" -- jo "jw -b @ROOT@ @ROOTBLK@" "jw -b @ITABLE@ /dev/zero" jc
jseed j4-zero-bitmaps "${j4[@]}" -- jo "jw -b @BITMAPS@ /dev/zero" jc
jseed j4-csum3 "${j4[@]}" -- "jo -c" "jw -b @BITMAPS@ /dev/zero" jc
jseed j4-csum3-revoked "${j4c[@]}" -- "jo -c" "jw -b @BITMAPS@,@ROOT@ /dev/zero" jc "jo -c" "jw -r @ROOT@" jc
jseed j4-csum3-two "${j4c[@]}" -- "jo -c" "jw -b @ROOT@ @ROOTBLK@" jc "jo -c" "jw -b @BITMAPS@ /dev/zero" jc

# Dirty journals written by ext4kit: the crash images of a few writes
# through its own journal (fuzz/examples/journal_seeds.rs), from the
# journalled seeds above and two more bases.
for name in ext3-journal ext4-journal-csum; do
    [ -f "$out/$name" ] && cp "$out/$name" "$work/base-$name"
done
make_base() { # name mkfs options…
    local name=$1 mkfs=$2
    shift 2
    "$mkfs" "${seed_opts[@]}" "$@" "$work/base-$name" 3M >/dev/null 2>&1 || rm -f "$work/base-$name"
}
make_base ext4-64-csum mkfs.ext4 -b 1024 -N 64 -J size=1 -O 64bit,metadata_csum
make_base ext3-plain mkfs.ext3 -b 1024 -N 64 -J size=1
mkdir -p "$work/crash"
if (cd "$here" && cargo build -q --example journal_seeds); then
    "$here/target/debug/examples/journal_seeds" "$work/crash" "$work"/base-* 2>&1 | sed 's/^/  /' || true
else
    echo "ext4kit's own dirty journals: skipped, the journal_seeds example did not build" >&2
fi
for f in "$work"/crash/*; do
    [ -f "$f" ] || continue
    if [ "$(stat -c %s "$f")" -le "$max" ]; then
        cp "$f" "$replay/$(basename "$f")"
        cp "$f" "$fsck/$(basename "$f")"
    fi
done

# e2fsprogs' test images no larger than $max: the j_* ones (dirty or
# damaged journals) for both targets, the f_* ones (damaged file systems)
# for the checker.
tests=${E2FSPROGS_TESTS:-$here/../../shared/peer-data/e2fsprogs-tests}
if [ -d "$tests" ]; then
    for gz in "$tests"/[jf]_*/image.gz; do
        [ -f "$gz" ] || continue
        t=$(basename "$(dirname "$gz")")
        zcat "$gz" >"$work/t.img" 2>/dev/null || continue
        [ "$(stat -c %s "$work/t.img")" -le "$max" ] || continue
        cp "$work/t.img" "$fsck/$t"
        case $t in j_*) cp "$work/t.img" "$replay/$t" ;; esac
    done
else
    echo "e2fsprogs test images: skipped, no $tests (set E2FSPROGS_TESTS)" >&2
fi
echo "corpus: $replay ($(ls "$replay" | wc -l) images)"
echo "corpus: $fsck ($(ls "$fsck" | wc -l) images)"
