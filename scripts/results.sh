#!/usr/bin/env bash
# Reruns the seeds' experiments behind docs/RESULTS.md with the benchmark
# suite and writes each report (Markdown, JSON, plots) to docs/results/.
# Images run the engine on the disk model (modeled time: the same figures
# on any machine); `--kernel` runs need root and take wall time.
#
#   scripts/results.sh            # everything (about 7 minutes)
#   K=path/to/ext4kit scripts/results.sh
set -euo pipefail
cd "$(dirname "$0")/.."
K=${K:-target/release/ext4kit}
[ -x "$K" ] || cargo build --release -p ext4kit-cli
OUT=docs/results
mkdir -p "$OUT"
WORK=$(mktemp -d /var/tmp/ext4kit-results.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# run NAME ARGS...: `ext4kit ARGS --json OUT/NAME.json`, its Markdown with
# the command line on top into OUT/NAME.md.
run() {
    local name=$1
    shift
    echo "== $name: ext4kit $*" >&2
    {
        printf '```\n$ ext4kit %s\n```\n\n' "$*"
        "$K" "$@" --json "$OUT/$name.json"
    } >"$OUT/$name.md.tmp"
    mv "$OUT/$name.md.tmp" "$OUT/$name.md"
}

# Seed 000: creates in one directory, linear against htree.
run 000-linear bench create-scale --target "$WORK/linear.img" -n 100000 --no-dir-index --plot "$OUT/000-linear.svg"
run 000-htree bench create-scale --target "$WORK/htree.img" -n 100000 --plot "$OUT/000-htree.svg"
run 000-htree-no-lookup bench create-scale --target "$WORK/htree-nl.img" -n 100000 --no-lookup

# Seed 004: PostMark's three tests on ext4, ext3 and ext2 layouts made by
# the engine, a cache smaller than the pool as the seed asks.
for t in test1 test2 test3; do
    run "004-postmark-$t" bench postmark --target "$WORK/pm-$t.img" --preset "$t" --scale 0.1 \
        --block-size 4096 --cache 8M --compare type=ext3 --compare type=ext2 --rounds 1 \
        --plot "$OUT/004-postmark-$t.svg"
done
if [ "$(id -u)" = 0 ]; then
    run 004-postmark-kernel bench postmark --kernel ext4 --scale 0.1 \
        --compare kernel=ext3 --compare kernel=ext2 --rounds 3
fi

# Seed 002: the four parameters from timing alone.
run 002-fsparams-4k bench fsparams --target "$WORK/fsp4k.img" --block-size 4096 --cache 8M --size 32M
run 002-fsparams-1k bench fsparams --target "$WORK/fsp1k.img" --block-size 1024 --cache 4M --size 16M
run 002-fsparams-ext3 bench fsparams --target "$WORK/fsp3.img" --type ext3 --block-size 4096 --cache 8M --size 32M
if [ "$(id -u)" = 0 ]; then
    run 002-fsparams-kernel bench fsparams --kernel ext4 --size 64M
fi

# Seed 001: compilebench and the FFSB metadata mix, ext4 against ext3.
run 001-compilebench bench compilebench --target "$WORK/cb.img" --block-size 4096 --cache 32M \
    --compare type=ext3 --rounds 1 --plot "$OUT/001-compilebench.svg"
run 001-ffsb-table2 bench ffsb-meta --target "$WORK/ffsb2.img" --preset table2 --block-size 4096 \
    --cache 16M --compare type=ext3 --rounds 1
# Tables 1-4 proper: on one ext4 layout, mballoc against the ext3
# allocator, flex_bg against none, the flex_bg inode allocator against Orlov.
# The ext3 variants run as ext3 did, allocating at every write
# (`delalloc=0`); ext4's default has delayed allocation.
run 001-compilebench-alloc bench compilebench --target "$WORK/cba.img" --block-size 4096 --cache 32M \
    --compare alloc=ext3,delalloc=0 --compare features=^flex_bg --compare inode_alloc=flexbg --rounds 1
run 001-ffsb-table2-alloc bench ffsb-meta --target "$WORK/ffsb2a.img" --preset table2 --block-size 4096 \
    --cache 16M --compare alloc=ext3,delalloc=0 --compare features=^flex_bg --compare inode_alloc=flexbg --rounds 1
run 001-ffsb-table3 bench ffsb-meta --target "$WORK/ffsb3.img" --preset table3 --block-size 4096 --cache 16M \
    --compare features=^flex_bg --rounds 1

# Seed 001 figures 7-8: a large file streamed between small-file writes.
run 001-interleave bench interleave --target "$WORK/il.img" --block-size 4096 --plot "$OUT/001-interleave.svg"
run 001-interleave-alloc bench interleave --target "$WORK/ila.img" --block-size 4096 --compare alloc=ext3,delalloc=0 \
    --compare delalloc=0 --rounds 1
# Delayed allocation against allocation at every write (issue 15).
run 001-compilebench-delalloc bench compilebench --target "$WORK/cbd.img" --block-size 4096 --cache 32M \
    --compare delalloc=0 --rounds 1
if [ "$(id -u)" = 0 ]; then
    run 001-interleave-kernel bench interleave --kernel ext4
fi
# Preallocated files written at random (issue 15).
run 001-randwrite bench randwrite --target "$WORK/rw.img" --size 64M --block-size 4096
# Allocation CPU cost (issue 15): 4 KiB writes of one file in memory under
# each block allocator, with and without delayed allocation; wall and CPU
# time, so these figures depend on the machine.
echo "== 001-alloc-cpu" >&2
cargo build --release -q -p ext4kit-engine --example alloc_cpu
{
    printf '```\n$ target/release/examples/alloc_cpu --rounds 5 64 256 1024\n```\n\n'
    target/release/examples/alloc_cpu --rounds 5 64 256 1024
} >"$OUT/001-alloc-cpu.md.tmp"
mv "$OUT/001-alloc-cpu.md.tmp" "$OUT/001-alloc-cpu.md"
# Aging (issue 15): 30 rounds of create/patch/delete on a 70%-full 1 GiB
# image; extents per file and free-space extents under mballoc, the ext3
# allocator and (as root) the kernel, all on the same operation sequence.
# The kernel's counts vary a little between runs, hence 3 rounds.
if [ "$(id -u)" = 0 ]; then
    run 001-aging bench aging --target "$WORK/ag.img" --compare alloc=ext3,delalloc=0 --compare delalloc=0 \
        --compare kernel=ext4 --rounds 3
else
    run 001-aging bench aging --target "$WORK/ag.img" --compare alloc=ext3,delalloc=0 --compare delalloc=0 --rounds 1
fi

# Seed 003: readdir order against inode order in one large directory.
run 003-readdir-stat bench readdir-stat --target "$WORK/rs.img" -n 20000 --size 4096 --block-size 4096 \
    --cache 16M --plot "$OUT/003-readdir-stat.svg"

# Seed 003 with its itree (issue 16): hash order, the inode-order snapshot
# (`-o readdir=inode`) and the itree side by side, 4 KiB files. N003=1000000
# is the published run (about 30 minutes); the default keeps this script short.
run 003-itree bench readdir-stat --target "$WORK/rsi.img" -n "${N003:-100000}" --size 4096 --block-size 4096 \
    --compare readdir=inode --compare features=itree --rounds 1 --plot "$OUT/003-itree.svg"

# The disk model itself: one file streamed, on each profile.
run seqio-profiles bench seqio --target "$WORK/seq.img" --size 256M --block-size 4096 \
    --compare disk=ssd --compare disk=none --rounds 1
echo "results in $OUT" >&2
