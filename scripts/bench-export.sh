#!/usr/bin/env bash
# scripts/bench-export.sh — how fast does `ext4kit export` copy a whole image
# out, next to `debugfs rdump` and the kernel (`mount -o loop,ro` + `cp -a`)?
#
# Usage:  scripts/bench-export.sh            (from the repository root)
#
# Steps:
#   1. builds the release `ext4kit` binary;
#   2. writes a deterministic mixed tree of ~SIZE_MB MiB into the scratch dir:
#      many small files (1–64 KiB), medium ones (1–16 MiB), a few large ones
#      (100+ MiB, or 10% of the tree each when SIZE_MB is small), two sparse
#      files, two directories with thousands of entries, symlinks, hard links,
#      varied modes, owners and mtimes — all drawn from SEED;
#   3. makes an ext4 image of it with `mkfs.ext4 -q -d`, ~1.3x the tree;
#   4. REPS times, each tool from a cold page cache (`sync; echo 3 >
#      /proc/sys/vm/drop_caches`), into an empty DEST removed afterwards:
#        ext4kit   ext4kit export -q --trusted IMG / DEST
#        debugfs   debugfs -R 'rdump / DEST' IMG
#        kernel    mount -o loop,ro IMG MNT; cp -a MNT/. DEST; umount MNT
#      Only the command is timed (mount and umount included for the kernel);
#      the dirty destination pages are synced, untimed, before the next run;
#   5. checks once that ext4kit's export equals the kernel's copy: `diff -r`
#      (lost+found excluded) and a `stat -c '%a %u %g %Y %h'` listing of
#      every path, type included;
#   6. prints a Markdown table (median/min/max seconds per tool, ratios
#      ext4kit/debugfs and ext4kit/kernel of the medians) and writes the raw
#      timings as JSON.
#
# Environment:
#   SIZE_MB  tree size in MiB (default 2048)
#   REPS     repetitions per tool (default 3)
#   OUT      JSON report (default target/bench-export.json)
#   SEED     tree generator seed (default 1)
#   SCRATCH  work directory: tree, image, destinations (default
#            target/bench-export); the tree and image are reused when a
#            previous run made them with the same SIZE_MB and SEED
#   KEEP     1 keeps the scratch directory afterwards (default 1)
#
# Needs: cargo, python3, mkfs.ext4 (e2fsprogs >= 1.43), debugfs, diff.
# Root is needed for the cold cache, for chown in the tree and for the kernel
# run; without root those are skipped, loudly, and the report says so.
set -euo pipefail

SIZE_MB=${SIZE_MB:-2048}
REPS=${REPS:-3}
OUT=${OUT:-target/bench-export.json}
SEED=${SEED:-1}
SCRATCH=${SCRATCH:-target/bench-export}
KEEP=${KEEP:-1}

root_dir=$(cd "$(dirname "$0")/.." && pwd)
cd "$root_dir"
mkdir -p "$SCRATCH" "$(dirname "$OUT")"
SCRATCH=$(cd "$SCRATCH" && pwd)
tree=$SCRATCH/tree
img=$SCRATCH/image.ext4
dest=$SCRATCH/dest
mnt=$SCRATCH/mnt
stamp=$SCRATCH/tree.stamp
times=$SCRATCH/times.tsv

log() { printf '%s\n' "$*" >&2; }

is_root=0
[ "$(id -u)" -eq 0 ] && is_root=1
if [ "$is_root" -ne 1 ]; then
    log "*** not root: NO cold cache between runs (drop_caches needs root),"
    log "*** NO kernel run (mount needs root), files keep the caller's owner."
fi

cleanup() {
    if mountpoint -q "$mnt" 2>/dev/null; then umount "$mnt" || true; fi
    rm -rf "$dest" "$SCRATCH/verify-ext4kit" "$SCRATCH/verify-kernel"
    if [ "$KEEP" != 1 ]; then rm -rf "$SCRATCH"; fi
}
trap cleanup EXIT

log "== building the release binary"
cargo build --release -q -p ext4kit-cli
bin=$root_dir/target/release/ext4kit
for tool in mkfs.ext4 debugfs python3 diff; do
    command -v "$tool" >/dev/null || {
        log "missing $tool"
        exit 1
    }
done

# --- the tree -------------------------------------------------------------
want="size=$SIZE_MB seed=$SEED root=$is_root"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -f "$img" ]; then
    log "== reusing the tree and image in $SCRATCH ($want)"
else
    rm -rf "$tree" "$img" "$stamp"
    log "== writing a ${SIZE_MB} MiB tree (seed $SEED) to $tree"
    python3 - "$tree" "$SIZE_MB" "$SEED" "$is_root" <<'PY'
import os, random, sys

root, size_mb, seed, is_root = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
rng = random.Random(seed)
MiB, KiB = 1 << 20, 1 << 10
total = size_mb * MiB
# A pool of pseudo-random bytes; files are slices of it at random offsets,
# so contents differ between files yet cost no per-byte generation.
pool = rng.randbytes(64 * MiB)
os.makedirs(root)
T0 = 1_600_000_000  # mtimes spread over the following ~3 years

def write(path, size):
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, len(pool) // 2)
            off = rng.randrange(0, len(pool) - n + 1)
            f.write(pool[off:off + n])
            left -= n

def meta(path, is_dir=False):
    mode = rng.choice([0o755, 0o750, 0o700]) if is_dir else rng.choice([0o644, 0o600, 0o640, 0o755, 0o444])
    os.chmod(path, mode)
    if is_root:
        os.chown(path, rng.choice([0, 1000, 1001, 65534]), rng.choice([0, 100, 1000]))
    t = T0 + rng.randrange(0, 100_000_000)
    os.utime(path, ns=(t * 10**9 + rng.randrange(10**9), t * 10**9 + rng.randrange(10**9)), follow_symlinks=False)

budget = {"large": total * 30 // 100, "medium": total * 35 // 100}
budget["small"] = total - budget["large"] - budget["medium"]
dirs = []
for i in range(40):
    d = os.path.join(root, f"d{i:02}", f"sub{i % 7}")
    os.makedirs(d, exist_ok=True)
    dirs.append(d)
    dirs.append(os.path.dirname(d))
files, used = [], 0

# Large: three files (100+ MiB each when the tree is big enough).
big = os.path.join(root, "large")
os.makedirs(big)
dirs.append(big)
n_large = 3
each = budget["large"] // n_large
for i in range(n_large):
    p = os.path.join(big, f"large-{i}.bin")
    write(p, each)
    files.append(p)
    used += each

# Medium: 1–16 MiB.
left = budget["medium"]
i = 0
while left > 0:
    sz = min(left, rng.randrange(1 * MiB, 16 * MiB + 1))
    p = os.path.join(rng.choice(dirs), f"medium-{i}.dat")
    write(p, sz)
    files.append(p)
    left -= sz
    used += sz
    i += 1

# Two sparse files: data, a hole, data.
for i in range(2):
    p = os.path.join(root, f"sparse-{i}.img")
    with open(p, "wb") as f:
        f.write(pool[:256 * KiB])
        f.seek(64 * MiB)
        f.write(pool[256 * KiB:512 * KiB])
    files.append(p)

# Two wide directories: thousands of small entries each.
left = budget["small"]
for w in range(2):
    d = os.path.join(root, f"wide-{w}")
    os.makedirs(d)
    dirs.append(d)
    for j in range(3000):
        sz = rng.randrange(1 * KiB, 8 * KiB + 1)
        p = os.path.join(d, f"entry-{j:05}-{rng.randrange(1 << 30):08x}")
        write(p, sz)
        files.append(p)
        left -= sz

# Small: 1–64 KiB, the rest of the budget.
i = 0
while left > 0:
    sz = min(left, rng.randrange(1 * KiB, 64 * KiB + 1))
    p = os.path.join(rng.choice(dirs), f"small-{i}.txt")
    write(p, sz)
    files.append(p)
    left -= sz
    i += 1

for p in files:
    meta(p)
# Hard links (to small and medium files) and symlinks (fast and slow).
plain = [p for p in files if os.path.getsize(p) < 16 * MiB]
for i in range(300):
    src = rng.choice(plain)
    os.link(src, os.path.join(rng.choice(dirs), f"hardlink-{i}"))
for i in range(600):
    d = rng.choice(dirs)
    target = os.path.relpath(rng.choice(files), d)
    if i % 3 == 0:
        target = "x" * rng.randrange(60, 200) + "/" + target  # slow (dangling) symlink
    p = os.path.join(d, f"symlink-{i}")
    os.symlink(target, p)
    if is_root:
        os.chown(p, 1000, 1000, follow_symlinks=False)
    os.utime(p, ns=(T0 * 10**9, (T0 + i) * 10**9), follow_symlinks=False)
# Directory metadata last, deepest first, so contents do not touch it again.
for d in sorted(set(dirs), key=len, reverse=True):
    meta(d, is_dir=True)
print(f"{len(files)} files, {len(set(dirs))} directories, 300 hard links, 600 symlinks", file=sys.stderr)
PY
    tree_bytes=$(du -s -B1 "$tree" | cut -f1)
    img_bytes=$((tree_bytes * 13 / 10 + 64 * 1024 * 1024))
    img_bytes=$((img_bytes / 4096 * 4096))
    log "== mkfs.ext4 -d: tree uses $tree_bytes bytes, image $img_bytes bytes"
    t0=$EPOCHREALTIME
    truncate -s "$img_bytes" "$img" # an existing file keeps mkfs quiet
    mkfs.ext4 -q -F -d "$tree" "$img"
    log "   mkfs took $(python3 -c "print(f'{$EPOCHREALTIME - $t0:.1f}')") s"
    echo "$want" >"$stamp"
fi
tree_bytes=$(du -s -B1 "$tree" | cut -f1)
img_bytes=$(stat -c %s "$img")
n_paths=$(find "$tree" | wc -l)

# --- the runs -------------------------------------------------------------
cold() {
    sync
    if [ "$is_root" -eq 1 ]; then echo 3 >/proc/sys/vm/drop_caches; fi
}

run_ext4kit() { "$bin" export -q --trusted "$img" / "$1"; }
run_debugfs() {
    mkdir -p "$1"
    debugfs -R "rdump / $1" "$img" >/dev/null 2>"$SCRATCH/debugfs.err"
    if grep -v '^debugfs ' "$SCRATCH/debugfs.err" | grep -q .; then
        log "   debugfs said: $(grep -v '^debugfs ' "$SCRATCH/debugfs.err" | head -n 3)"
    fi
}
run_kernel() {
    mkdir -p "$mnt" "$1"
    mount -o loop,ro "$img" "$mnt"
    cp -a "$mnt/." "$1"
    umount "$mnt"
}

tools=(ext4kit debugfs)
if [ "$is_root" -eq 1 ]; then
    tools+=(kernel)
else
    log "*** skipping the kernel run: not root"
fi
: >"$times"
for rep in $(seq 1 "$REPS"); do
    for tool in "${tools[@]}"; do
        rm -rf "$dest"
        cold
        t0=$EPOCHREALTIME
        "run_$tool" "$dest"
        t1=$EPOCHREALTIME
        secs=$(python3 -c "print(f'{$t1 - $t0:.3f}')")
        printf '%s\t%s\t%s\n' "$tool" "$rep" "$secs" >>"$times"
        log "   rep $rep $tool: $secs s"
        sync
    done
done
rm -rf "$dest"

# --- equivalence with the kernel's copy -----------------------------------
verify="skipped (not root)"
if [ "$is_root" -eq 1 ]; then
    log "== checking ext4kit's export against the kernel's copy"
    a=$SCRATCH/verify-ext4kit
    b=$SCRATCH/verify-kernel
    rm -rf "$a" "$b"
    run_ext4kit "$a"
    run_kernel "$b"
    listing() {
        (cd "$1" && find . -path ./lost+found -prune -o -print0 | sort -z |
            xargs -0 stat -c '%n %F %a %u %g %Y %h')
    }
    problems=()
    if ! diff -r --no-dereference -x lost+found "$a" "$b" >"$SCRATCH/diff.txt" 2>&1; then
        problems+=("diff -r differs ($(wc -l <"$SCRATCH/diff.txt") lines, see $SCRATCH/diff.txt)")
    fi
    if ! diff <(listing "$a") <(listing "$b") >"$SCRATCH/stat-diff.txt"; then
        problems+=("stat listings differ ($(grep -c '^<' "$SCRATCH/stat-diff.txt") paths, see $SCRATCH/stat-diff.txt)")
    fi
    if [ ${#problems[@]} -eq 0 ]; then
        verify="identical (diff -r and stat '%a %u %g %Y %h' of $n_paths paths)"
    else
        verify="DIFFERENT: ${problems[*]}"
        log "*** $verify"
        head -n 10 "$SCRATCH/diff.txt" "$SCRATCH/stat-diff.txt" >&2 || true
    fi
    rm -rf "$a" "$b"
fi

# --- report ---------------------------------------------------------------
python3 - "$times" "$OUT" "$SIZE_MB" "$REPS" "$SEED" "$tree_bytes" "$img_bytes" \
    "$n_paths" "$is_root" "$verify" "$("$bin" --version 2>/dev/null || echo ext4kit)" <<'PY'
import json, statistics, sys

times, out, size_mb, reps, seed, tree_bytes, img_bytes, n_paths, is_root, verify, version = sys.argv[1:]
runs = {}
for line in open(times):
    tool, rep, secs = line.split("\t")
    runs.setdefault(tool, []).append(float(secs))
summary = {
    t: {"median": statistics.median(v), "min": min(v), "max": max(v), "runs": len(v)}
    for t, v in runs.items()
}
ratios = {}
for other in ("debugfs", "kernel"):
    if "ext4kit" in summary and other in summary:
        ratios[f"ext4kit/{other}"] = summary["ext4kit"]["median"] / summary[other]["median"]
print(f"\nexport of a {int(tree_bytes) / 2**20:.0f} MiB tree ({n_paths} paths) from a "
      f"{int(img_bytes) / 2**20:.0f} MiB image, {reps} runs each, "
      f"{'cold' if is_root == '1' else 'WARM (not root)'} page cache\n")
print("| tool | median s | min s | max s | runs |")
print("|---|---:|---:|---:|---:|")
for t, s in summary.items():
    print(f"| {t} | {s['median']:.2f} | {s['min']:.2f} | {s['max']:.2f} | {s['runs']} |")
print()
for k, v in ratios.items():
    print(f"- {k} (medians): {v:.2f}")
print(f"- ext4kit export vs kernel cp -a: {verify}")
report = {
    "command": "scripts/bench-export.sh",
    "ext4kit": version.strip(),
    "size_mb": int(size_mb), "reps": int(reps), "seed": int(seed),
    "tree_bytes": int(tree_bytes), "image_bytes": int(img_bytes), "paths": int(n_paths),
    "cold_cache": is_root == "1",
    "runs_seconds": runs, "summary": summary, "ratios": ratios,
    "verify": verify,
}
with open(out, "w") as f:
    json.dump(report, f, indent=2)
print(f"\nraw timings: {out}")
PY
