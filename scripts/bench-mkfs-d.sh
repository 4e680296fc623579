#!/usr/bin/env bash
# scripts/bench-mkfs-d.sh — how fast does `ext4kit mkfs -d` build a populated
# image, next to `mke2fs -d` on the same tree and the same image size?
#
# Usage:  scripts/bench-mkfs-d.sh            (from the repository root)
#
# Steps:
#   1. builds the release `ext4kit` binary (unless EXT4KIT is given);
#   2. writes, once, a deterministic tree of FILES regular files (sizes drawn
#      from SEED: most 1–24 KiB, one in ten 64–128 KiB, ~2 GiB for 100,000
#      files) in directories of ~500 entries, two of ~5,000, plus symlinks,
#      varied modes and mtimes; a stamp file lets later runs reuse it;
#   3. REPS times, alternating the tools, each into a fresh image file of
#      IMG_GB GiB on /tmp (removed before each run; the page cache is warm for
#      the tree, as both tools see it the same way):
#        ext4kit  ext4kit mkfs -q -F -d TREE IMG SIZE
#        mke2fs   mke2fs -q -F -t ext4 -d TREE IMG SIZE
#      The timed command includes its own final sync of the image file
#      (both tools fsync/flush at the end; `sync IMG` is added for fairness);
#   4. runs `e2fsck -fn` on the last image of each tool (exit 0 required);
#   5. prints the median, min and max seconds per tool and the ratio
#      mke2fs/ext4kit of the medians.
#
# Environment:
#   FILES    number of regular files (default 100000)
#   REPS     repetitions per tool (default 3)
#   IMG_GB   image size in GiB (default 4)
#   SEED     tree generator seed (default 1)
#   SCRATCH  tree directory parent (default /tmp/bench-mkfs-d)
#   EXT4KIT  ext4kit binary to time (default: target/release/ext4kit, built)
#
# Needs: cargo, python3, mke2fs (e2fsprogs >= 1.43), e2fsck.
set -euo pipefail

FILES=${FILES:-100000}
REPS=${REPS:-3}
IMG_GB=${IMG_GB:-4}
SEED=${SEED:-1}
SCRATCH=${SCRATCH:-/tmp/bench-mkfs-d}

root_dir=$(cd "$(dirname "$0")/.." && pwd)
cd "$root_dir"
log() { echo "$@" >&2; }

if [ -z "${EXT4KIT:-}" ]; then
    cargo build --release -q -p ext4kit-cli
    EXT4KIT=$root_dir/target/release/ext4kit
fi
mkdir -p "$SCRATCH"
tree=$SCRATCH/tree
stamp=$SCRATCH/tree.stamp
img=$SCRATCH/image.ext4

want="files=$FILES seed=$SEED"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    log "== reusing the tree in $tree ($want)"
else
    rm -rf "$tree" "$stamp"
    log "== writing $FILES files (seed $SEED) to $tree"
    python3 - "$tree" "$FILES" "$SEED" <<'PY'
import os, random, sys

root, nfiles, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
KiB = 1 << 10
# File contents are slices of one pseudo-random pool: distinct, nonzero
# (no holes to detect), and cheap to produce.
pool = rng.randbytes(8 << 20)
T0 = 1_600_000_000
os.makedirs(root)

def meta(path, is_dir=False):
    os.chmod(path, rng.choice([0o755, 0o750]) if is_dir else rng.choice([0o644, 0o600, 0o640, 0o755]))
    t = T0 + rng.randrange(0, 100_000_000)
    os.utime(path, ns=(t * 10**9 + rng.randrange(10**9), t * 10**9 + rng.randrange(10**9)), follow_symlinks=False)

# Two big directories (~5,000 entries each), the rest in ~500-entry ones
# two levels deep.
big = max(1, nfiles // 20)
dirs, left, i = [], nfiles, 0
for n in (big, big):
    dirs.append((os.path.join(root, f"big{len(dirs)}"), n))
    left -= n
while left > 0:
    n = min(500, left)
    dirs.append((os.path.join(root, f"d{i // 20:03}", f"s{i % 20:02}"), n))
    left -= n
    i += 1
total = 0
for d, n in dirs:
    os.makedirs(d, exist_ok=True)
    for k in range(n):
        size = rng.randrange(64 * KiB, 128 * KiB) if rng.random() < 0.1 else rng.randrange(1 * KiB, 24 * KiB)
        off = rng.randrange(0, len(pool) - size)
        p = os.path.join(d, f"f{k:05}")
        with open(p, "wb") as f:
            f.write(pool[off:off + size])
        meta(p)
        total += size
    for k in range(n // 100):
        os.symlink(f"f{k:05}", os.path.join(d, f"l{k:03}"))
for dirpath, _, _ in sorted(os.walk(root), reverse=True):
    meta(dirpath, True)
print(f"{nfiles} files, {total / (1 << 30):.2f} GiB", file=sys.stderr)
PY
    echo "$want" >"$stamp"
fi

size="${IMG_GB}G"
declare -A t
for rep in $(seq 1 "$REPS"); do
    for tool in ext4kit mke2fs; do
        rm -f "$img"
        sync
        start=$(date +%s.%N)
        if [ "$tool" = ext4kit ]; then
            "$EXT4KIT" mkfs -q -F -d "$tree" "$img" "$size"
        else
            mke2fs -q -F -t ext4 -d "$tree" "$img" "$size"
        fi
        sync "$img"
        end=$(date +%s.%N)
        s=$(echo "$end - $start" | bc)
        log "   $tool run $rep: $s s"
        t[$tool]="${t[$tool]:-} $s"
    done
done

# Both tools' last image must be clean.
for tool in ext4kit mke2fs; do
    rm -f "$img"
    if [ "$tool" = ext4kit ]; then
        "$EXT4KIT" mkfs -q -F -d "$tree" "$img" "$size"
    else
        mke2fs -q -F -t ext4 -d "$tree" "$img" "$size"
    fi
    e2fsck -fn "$img" >/dev/null 2>&1 || {
        log "e2fsck -fn failed on the $tool image"
        e2fsck -fn "$img" | tail -20 >&2
        exit 1
    }
    log "   $tool image: e2fsck -fn clean"
done
rm -f "$img"

stats() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {printf "%.3f %.3f %.3f", a[int((NR+1)/2)], a[1], a[NR]}'; }
read -r em emin emax <<<"$(echo "${t[ext4kit]}" | stats)"
read -r mm mmin mmax <<<"$(echo "${t[mke2fs]}" | stats)"
echo "| tool | median s | min s | max s |"
echo "|---|---|---|---|"
echo "| ext4kit mkfs -d | $em | $emin | $emax |"
echo "| mke2fs -d | $mm | $mmin | $mmax |"
echo "ratio mke2fs/ext4kit (medians): $(echo "scale=2; $mm / $em" | bc)"
