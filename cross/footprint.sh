#!/usr/bin/env bash
# Measure the edge client's footprint: stripped binary size per target, peak memory (max RSS) and
# time per local epoch while training LeNet-5 on 600 Fashion-MNIST samples, natively on the x86-64
# host and under qemu-user for the ARM targets; and peak memory while holding one client's shard of
# a partition of the full Fashion-MNIST, as `edge-client run --partition ...` does.
#
#   cross/footprint.sh [--no-build] [--out DIR] [--repeats N] [--note TEXT] [TARGET...]
#   cross/footprint.sh --report-only [--out DIR] [TARGET...]   (rewrite the report from DIR/raw/)
#
# TARGET: host (the x86-64 build) and/or ARM targets as in cross/build.sh; default: host and the
# three ARM targets. --no-build measures the binaries already in $CARGO_TARGET_DIR (default
# <workspace>/target). Results go to DIR (default cross/results): footprint.json, footprint.md, and
# the raw `/usr/bin/time -v` and bench outputs under DIR/raw/. --note TEXT is recorded with them
# (e.g. which source tree was measured when it is not a git checkout).
#
# What runs, per binary:
#   /usr/bin/time -v [QEMU] edge-client --help                        (baseline: process/emulator alone)
#   EDGECFL_FMNIST_DIR=DIR/shard600 /usr/bin/time -v [QEMU] edge-client bench --model lenet5 \
#       --backends flex --batches 10 --samples 600 --repeats N         (a device holding 600 samples)
#   EDGECFL_FMNIST_DIR=SRC ... the same bench with the full Fashion-MNIST installed (SRC, default
#       /usr/share/datasets/fashion-mnist): it reads the first 600 training images and no others
# and, per partition mode MODE in PARTITIONS (below), with the full Fashion-MNIST:
#   /usr/bin/time -v [QEMU] edge-client bench ... --data SRC --partition SPEC --of N --index I
# which loads the shard exactly as `edge-client run` does (labels first, then only the shard's
# training images and its local test set, held for the whole bench) and trains on its first 600.
# The last mode, `iid` of 1, is one client holding all 60 000 + 10 000 images: the memory of
# `edge-client run` without --partition on a directory holding the full dataset.
# `bench` trains one untimed warm-up epoch and then N timed epochs of 600 samples at batch size 10
# (the federation default) and reports the median samples/s; epoch seconds = 600 / that.
# A binary that comes out of the build unstripped is measured as BIN.stripped (a stripped copy, as
# cross/build.sh makes it; made here if missing or older than BIN).
#
# Under qemu-user, "Maximum resident set size" is that of the qemu process: the guest program's
# memory plus the emulator's own (translated-code cache, its heap). It is an upper bound for the
# guest's RSS on a real board, not the board's figure; the --help baseline shows the emulator's
# share. Times under emulation are emulation times (TCG on this host), not board times.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

BUILD=1
OUT="$ROOT/cross/results"
REPEATS=3
SAMPLES=600
BATCH=10
TARGETS=()
NOTE=""
REPORT_ONLY=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --no-build) BUILD=0; shift ;;
        --report-only) REPORT_ONLY=1; BUILD=0; shift ;;
        --out) OUT="${2:?}"; shift 2 ;;
        --repeats) REPEATS="${2:?}"; shift 2 ;;
        --note) NOTE="${2:?}"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "unknown option $1" >&2; exit 2 ;;
        *) TARGETS+=("$1"); shift ;;
    esac
done
[[ ${#TARGETS[@]} -gt 0 ]] || TARGETS=(host aarch64-unknown-linux-gnu armv7-unknown-linux-gnueabihf aarch64-unknown-linux-musl)
mkdir -p "$OUT/raw"
OUT="$(cd "$OUT" && pwd)"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
[[ "$TARGET_DIR" = /* ]] || TARGET_DIR="$ROOT/$TARGET_DIR"

say() { printf '[cross/footprint.sh] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
[[ -x /usr/bin/time ]] || die "/usr/bin/time missing (Debian package: time)"
command -v python3 >/dev/null || die "python3 missing"

if [[ $REPORT_ONLY -eq 0 ]]; then
arm=()
for t in "${TARGETS[@]}"; do [[ "$t" == host ]] || arm+=("$t"); done
if [[ $BUILD -eq 1 ]]; then
    for t in "${TARGETS[@]}"; do
        if [[ "$t" == host ]]; then
            say "cargo build --release -p edge-client (host)"
            cargo build --release -p edge-client
        fi
    done
    if [[ ${#arm[@]} -gt 0 ]]; then
        "$ROOT/cross/build.sh" --qemu "${arm[@]}"
    fi
fi

built() { if [[ "$1" == host ]]; then echo "$TARGET_DIR/release/edge-client"; else echo "$TARGET_DIR/$1/release/edge-client"; fi; }
strip_tool() {
    case "$1" in
        host) echo strip ;;
        aarch64-*) echo aarch64-linux-gnu-strip ;;
        armv7-*) echo arm-linux-gnueabihf-strip ;;
    esac
}
# The binary measured: the build's output if stripped, else its stripped copy BIN.stripped.
binary() {
    local b; b="$(built "$1")"
    if [[ -x "$b" ]] && ! file -b "$b" | grep -q ', stripped'; then
        if [[ ! -x "$b.stripped" || "$b.stripped" -ot "$b" ]]; then
            "$(strip_tool "$1")" -o "$b.stripped" "$b" || die "cannot strip $b"
        fi
        b="$b.stripped"
    fi
    echo "$b"
}
runner() {
    case "$1" in
        host) echo "" ;;
        aarch64-unknown-linux-gnu) echo "qemu-aarch64 -L /usr/aarch64-linux-gnu" ;;
        armv7-unknown-linux-gnueabihf) echo "qemu-arm -L /usr/arm-linux-gnueabihf" ;;
        aarch64-unknown-linux-musl) echo "qemu-aarch64" ;;
        *) die "unknown target $1" ;;
    esac
}

# A 600-sample shard (plus 100 test images, which the loader requires) as plain IDX files.
SRC="${EDGECFL_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}"
[[ -d "$SRC" ]] || die "no Fashion-MNIST at $SRC: apt-get install dataset-fashion-mnist, or set EDGECFL_FMNIST_DIR"
SHARD="$OUT/shard600"
python3 - "$SRC" "$SHARD" "$SAMPLES" 100 <<'EOF'
import gzip, os, struct, sys
src, dst, n_train, n_test = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
os.makedirs(dst, exist_ok=True)
def read(name):
    p = os.path.join(src, name)
    if os.path.exists(p):
        return open(p, "rb").read()
    return gzip.open(p + ".gz", "rb").read()
for prefix, n in (("train", n_train), ("t10k", n_test)):
    img, lab = read(f"{prefix}-images-idx3-ubyte"), read(f"{prefix}-labels-idx1-ubyte")
    _, count, rows, cols = struct.unpack(">IIII", img[:16])
    assert count >= n and rows == 28 and cols == 28, (count, rows, cols)
    with open(os.path.join(dst, f"{prefix}-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28) + img[16:16 + n * 784])
    with open(os.path.join(dst, f"{prefix}-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + lab[8:8 + n])
EOF
say "shard: $SHARD ($SAMPLES train + 100 test images from $SRC)"

# run NAME TARGET DATA(-|shard|full) ARGS... : one measured process.
run() {
    local name="$1" t="$2" data="$3"; shift 3
    local bin; bin="$(binary "$t")"
    local r; r="$(runner "$t")"
    local -a envs=()
    case "$data" in
        shard) envs=(EDGECFL_FMNIST_DIR="$SHARD") ;;
        full) envs=(EDGECFL_FMNIST_DIR="$SRC") ;;
    esac
    say "$name: ${envs[*]:-} /usr/bin/time -v $r $bin $*"
    # shellcheck disable=SC2086
    env -u EDGECFL_FMNIST_DIR "${envs[@]}" /usr/bin/time -v -o "$OUT/raw/$name.time" \
        $r "$bin" "$@" >"$OUT/raw/$name.stdout" 2>"$OUT/raw/$name.stderr" \
        || die "$name failed, see $OUT/raw/$name.stderr"
    # Recorded relative to the checkout, so the files hold no path of this machine.
    printf '%s\n' "${envs[*]:-} /usr/bin/time -v $r $bin $*" | sed "s#$ROOT/##g" >"$OUT/raw/$name.cmd"
    sed -i "s#$ROOT/##g" "$OUT/raw/$name.time" "$OUT/raw/$name.stderr" "$OUT/raw/$name.stdout"
}

bench=(bench --model lenet5 --backends flex --batches "$BATCH" --samples "$SAMPLES" --repeats "$REPEATS")
# Partition modes NAME:SPEC:OF:INDEX (seed 0): 10-client label skew (~6 000 training + 2 000
# local test images), 10-client IID (6 000 + all 10 000 test images: the largest local test set),
# 10-client Dirichlet 0.1, and one client holding everything (the whole directory as its data).
PARTITIONS=("label2-of10 label:2 10 0" "iid-of10 iid 10 0" "dir0.1-of10 dir:0.1 10 0" "iid-of1 iid 1 0")
for t in "${TARGETS[@]}"; do
    [[ -x "$(built "$t")" ]] || die "$(built "$t") missing: build it (drop --no-build)"
    bin="$(binary "$t")"
    printf '%s\n' "${bin#"$ROOT"/}" >"$OUT/raw/$t.binary"
    file -b "$bin" >"$OUT/raw/$t.file"
    stat -c %s "$bin" >"$OUT/raw/$t.size"
    run "$t.help" "$t" - --help
    run "$t.bench-shard600" "$t" shard "${bench[@]}"
    run "$t.bench-full" "$t" full "${bench[@]}"
    for p in "${PARTITIONS[@]}"; do
        read -r pname pspec pof pindex <<<"$p"
        run "$t.bench-part-$pname" "$t" - "${bench[@]}" --data "$SRC" \
            --partition "$pspec" --of "$pof" --index "$pindex"
    done
done

# Environment facts for the record.
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
        echo "commit: $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- shared coordinator edge-client Cargo.toml Cargo.lock || echo ' + uncommitted changes')"
    else
        echo "commit: not a git checkout"
    fi
    echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
    echo "loadavg before report: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "rustc: $(rustc -V)"
    echo "qemu: $(qemu-aarch64 --version | head -1)"
    [[ -z "$NOTE" ]] || echo "note: $NOTE"
} >"$OUT/raw/env.txt"
fi  # REPORT_ONLY

python3 - "$OUT" "$SAMPLES" "$REPEATS" "$TARGET_DIR" "${TARGETS[@]}" <<'EOF'
import json, os, re, subprocess, sys
out, samples, repeats, target_dir, targets = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5:]
raw = os.path.join(out, "raw")

def timev(name):
    text = open(os.path.join(raw, name + ".time")).read()
    def field(label):
        m = re.search(re.escape(label) + r":\s*(.+)", text)
        return m.group(1).strip() if m else None
    wall = field("Elapsed (wall clock) time (h:mm:ss or m:ss)")
    parts = [float(p) for p in wall.split(":")]
    secs = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    return {
        "max_rss_kib": int(field("Maximum resident set size (kbytes)")),
        "wall_s": round(secs, 2),
        "user_s": float(field("User time (seconds)")),
        "sys_s": float(field("System time (seconds)")),
        "command": open(os.path.join(raw, name + ".cmd")).read().strip(),
    }

def bench(name):
    r = timev(name)
    data = json.loads(open(os.path.join(raw, name + ".stdout")).read())
    row = data[0] if isinstance(data, list) else data
    sps = row["samples_per_second"]
    r.update(samples_per_second=round(sps, 1), runs=[round(x, 1) for x in row["runs"]],
             epoch_s=round(samples / sps, 3))
    return r

result = {"samples": samples, "batch": 10, "repeats": repeats, "model": "lenet5", "backend": "flex",
          "env": dict(l.split(": ", 1) for l in open(os.path.join(raw, "env.txt")).read().splitlines()),
          "targets": {}}
for t in targets:
    def rawfile(ext):
        p = os.path.join(raw, f"{t}.{ext}")
        return open(p).read().strip() if os.path.exists(p) else None
    binp = rawfile("binary") or os.path.join(target_dir, "release" if t == "host" else t + "/release", "edge-client")
    desc = rawfile("file") or subprocess.run(["file", "-b", binp], capture_output=True, text=True).stdout.strip()
    size = int(rawfile("size") or os.path.getsize(binp))
    entry = {
        "binary": binp,
        "file": desc,
        "stripped": ", stripped" in desc,
        "size_bytes": size,
        "measured": "natively on x86-64" if t == "host" else "under qemu-user on x86-64 (emulated)",
        "help": timev(t + ".help"),
        "bench_shard600": bench(t + ".bench-shard600"),
    }
    if os.path.exists(os.path.join(raw, t + ".bench-full.time")):
        entry["bench_full_fmnist"] = bench(t + ".bench-full")
    parts = {}
    for f in sorted(os.listdir(raw)):
        prefix = t + ".bench-part-"
        if f.startswith(prefix) and f.endswith(".time"):
            name = f[len(prefix):-len(".time")]
            r = bench(prefix + name)
            err = open(os.path.join(raw, prefix + name + ".stderr")).read()
            m = re.search(r"bench: first (\d+) of (\d+) training samples \((\d+) test\) of (.+)", err)
            if m:
                r.update(trained=int(m.group(1)), train_held=int(m.group(2)),
                         test_held=int(m.group(3)), shard=m.group(4).strip())
            parts[name] = r
    if parts:
        entry["bench_partition"] = parts
    result["targets"][t] = entry
json.dump(result, open(os.path.join(out, "footprint.json"), "w"), indent=2)

mib = lambda b: b / 1048576
L = ["# Edge client footprint", "",
     "Generated by `cross/footprint.sh`. " + "; ".join(f"{k}: {v}" for k, v in result["env"].items()) + ".", "",
     f"LeNet-5, flex backend, batch 10, {samples} training samples, 1 warm-up + {repeats} timed epochs "
     "(`edge-client bench`). Under qemu-user the max RSS is the qemu process's (guest + emulator) and "
     "times are emulation times, not board times.", "",
     "| target | measured | stripped size | max RSS `--help` | max RSS bench, 600-sample shard | epoch s (samples/s) | bench wall s | max RSS bench, full FMNIST installed (first 600 read) |",
     "| --- | --- | --- | --- | --- | --- | --- | --- |"]
for t, e in result["targets"].items():
    b = e["bench_shard600"]
    full = e.get("bench_full_fmnist")
    full_rss = f"{full['max_rss_kib'] / 1024:.1f} MiB" if full else "-"
    L.append(f"| {t} | {e['measured']} | {e['size_bytes']} B ({mib(e['size_bytes']):.2f} MiB){'' if e['stripped'] else ' NOT stripped'} "
             f"| {e['help']['max_rss_kib'] / 1024:.1f} MiB | {b['max_rss_kib'] / 1024:.1f} MiB "
             f"| {b['epoch_s']:.2f} ({b['samples_per_second']:.0f}) | {b['wall_s']:.1f} "
             f"| {full_rss} |")
if any("bench_partition" in e for e in result["targets"].values()):
    L += ["", "One client's shard of a partition of the full Fashion-MNIST, loaded as `edge-client run "
          "--partition` loads it (labels first, then only the shard's images, held as bytes for the "
          "whole run: in memory, or, for training images above `--spill-above` (default 16 MiB), in "
          "an anonymous scratch file read back a batch at a time) and trained on for its first 600 "
          "samples. `iid` of 1 is one client holding all 60 000 + 10 000 images: the memory of "
          "`edge-client run` without `--partition` on the full dataset.", "",
          "| target | partition (seed 0) | training images held | local test images held | max RSS | bench wall s |",
          "| --- | --- | --- | --- | --- | --- |"]
    for t, e in result["targets"].items():
        for name, r in e.get("bench_partition", {}).items():
            shard = r.get("shard", name).split(", ", 1)[-1]
            held = r.get('train_held', '?')
            spill = ", images in a scratch file"
            if shard.endswith(spill):
                shard, held = shard[:-len(spill)], f"{held} (scratch file)"
            L.append(f"| {t} | {shard} | {held} | {r.get('test_held', '?')} "
                     f"| {r['max_rss_kib'] / 1024:.1f} MiB | {r['wall_s']:.1f} |")
L += ["", "Commands (from the checkout):", ""]
for t, e in result["targets"].items():
    for k in ("help", "bench_shard600", "bench_full_fmnist"):
        if k in e:
            L.append(f"    {e[k]['command']}")
    for r in e.get("bench_partition", {}).values():
        L.append(f"    {r['command']}")
open(os.path.join(out, "footprint.md"), "w").write("\n".join(L) + "\n")
print("\n".join(L))
EOF
say "wrote $OUT/footprint.json and $OUT/footprint.md"
