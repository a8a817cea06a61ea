#!/usr/bin/env bash
# Build the edge client for ARM boards.
#
#   cross/build.sh [OPTIONS] [TARGET...] [-- EXTRA_CARGO_ARGS...]
#
# TARGET is one or more of
#   aarch64-unknown-linux-gnu       Raspberry Pi 3/4/5 and Zero 2 W on a 64-bit OS, Jetson (default)
#   armv7-unknown-linux-gnueabihf   Raspberry Pi 2/3/Zero 2 W on a 32-bit OS
#   aarch64-unknown-linux-musl      static binary, any 64-bit ARM Linux
#   all                             the three above
#
# With `cross` and a working Docker/Podman engine it runs
#   CROSS_CONFIG=cross/Cross.toml cross +TOOLCHAIN build --target T -p edge-client --release
# (TOOLCHAIN: $CROSS_TOOLCHAIN, default the workspace rust-version, e.g. 1.95.0; see below)
# Otherwise (no container engine, as on the project's development machines and CI) it builds the
# same targets with `cargo` + `rustup` targets + Debian's cross gcc (linkers in .cargo/config.toml).
# It never installs anything without saying so first: missing rustup targets are added with
# `rustup target add`, missing Debian packages are installed with `apt-get install -y` only when
# running as root (CI); otherwise it prints the command to run and stops. --no-install turns all
# installing off (check and explain only).
#
# Options
#   --mode auto|cross|native   auto (default): cross if usable, else native
#   --features LIST            cargo features for edge-client (e.g. ndarray)
#   --qemu                     after building, run `edge-client --help` under qemu-user
#                              (installs qemu-user as root when missing, like the linkers)
#   --no-install               do not install anything; fail with an explanation instead
#   -h, --help                 this text
#
# Honours CARGO_TARGET_DIR (default: <workspace>/target). Prints, per target, where the binary is,
# its stripped size and the build time. The release profile already strips (strip = true).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

MODE=auto
FEATURES=""
QEMU=0
INSTALL=1
TARGETS=()
EXTRA=()
ALL_TARGETS=(aarch64-unknown-linux-gnu armv7-unknown-linux-gnueabihf aarch64-unknown-linux-musl)
SIZE_LIMIT=$((8 * 1024 * 1024)) # 8 MiB

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
say() { printf '[cross/build.sh] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        --mode) MODE="${2:?--mode needs a value}"; shift 2 ;;
        --mode=*) MODE="${1#*=}"; shift ;;
        --features) FEATURES="${2:?--features needs a value}"; shift 2 ;;
        --features=*) FEATURES="${1#*=}"; shift ;;
        --qemu) QEMU=1; shift ;;
        --no-install) INSTALL=0; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; EXTRA=("$@"); break ;;
        all) TARGETS+=("${ALL_TARGETS[@]}"); shift ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) TARGETS+=("$1"); shift ;;
    esac
done
[[ ${#TARGETS[@]} -gt 0 ]] || TARGETS=(aarch64-unknown-linux-gnu)
case "$MODE" in auto|cross|native) ;; *) die "--mode must be auto, cross or native" ;; esac

# Per-target facts: Debian linker package, linker/C compiler, qemu runner and its sysroot.
linker_pkg() {
    case "$1" in
        aarch64-unknown-linux-gnu|aarch64-unknown-linux-musl) echo gcc-aarch64-linux-gnu ;;
        armv7-unknown-linux-gnueabihf) echo gcc-arm-linux-gnueabihf ;;
        *) die "unsupported target $1 (supported: ${ALL_TARGETS[*]})" ;;
    esac
}
linker_bin() {
    case "$1" in
        aarch64-unknown-linux-gnu|aarch64-unknown-linux-musl) echo aarch64-linux-gnu-gcc ;;
        armv7-unknown-linux-gnueabihf) echo arm-linux-gnueabihf-gcc ;;
    esac
}
qemu_cmd() {
    case "$1" in
        aarch64-unknown-linux-gnu) echo "qemu-aarch64 -L /usr/aarch64-linux-gnu" ;;
        armv7-unknown-linux-gnueabihf) echo "qemu-arm -L /usr/arm-linux-gnueabihf" ;;
        aarch64-unknown-linux-musl) echo "qemu-aarch64" ;;   # static: no sysroot needed
    esac
}
for t in "${TARGETS[@]}"; do linker_pkg "$t" >/dev/null; done

# apt-get install, but only loudly, only as root, and only if allowed.
APT_UPDATED=0
apt_install() {
    local why="$1"; shift
    if [[ $INSTALL -eq 0 ]]; then
        die "missing $* ($why). Install with: sudo apt-get install -y $*  (or drop --no-install)"
    fi
    if [[ $(id -u) -ne 0 ]]; then
        die "missing $* ($why). Install with: sudo apt-get install -y $*  then re-run"
    fi
    command -v apt-get >/dev/null || die "missing $* ($why) and no apt-get here: install a cross gcc for the target and set CARGO_TARGET_<TRIPLE>_LINKER"
    say "installing Debian packages: $* ($why)"
    if [[ $APT_UPDATED -eq 0 ]]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >&2
}

cross_usable() {
    command -v cross >/dev/null 2>&1 || { say "cross: not installed (cargo install cross --version 0.2.5 --locked)"; return 1; }
    local engine="${CROSS_CONTAINER_ENGINE:-}"
    if [[ -z "$engine" ]]; then
        if command -v docker >/dev/null 2>&1; then engine=docker
        elif command -v podman >/dev/null 2>&1; then engine=podman
        else say "cross: installed, but no docker or podman on PATH"; return 1; fi
    fi
    if ! "$engine" info >/dev/null 2>&1; then
        say "cross: installed, but '$engine info' fails (no running container engine)"
        return 1
    fi
    return 0
}

USE_CROSS=0
case "$MODE" in
    cross) cross_usable || die "--mode cross: cross/Docker not usable (see above)"; USE_CROSS=1 ;;
    auto)
        if cross_usable; then USE_CROSS=1
        else say "falling back to native cross-compilation: cargo + rustup targets + Debian cross gcc"; fi ;;
    native) ;;
esac

# cross 0.2.5 misreads `rustup toolchain list` from rustup >= 1.28 (the default toolchain is listed
# as "stable-... (active, default)"), concludes the toolchain is missing and runs
# `rustup toolchain add stable` on every call, which updates stable (cross-rs/cross#1678). Naming
# the toolchain explicitly avoids that; default: the workspace's rust-version (1.95 -> 1.95.0).
if [[ $USE_CROSS -eq 1 && -z "${CROSS_TOOLCHAIN:-}" ]]; then
    rv="$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' "$ROOT/Cargo.toml" | head -1)"
    [[ "$rv" =~ ^[0-9]+\.[0-9]+$ ]] && rv="$rv.0"
    CROSS_TOOLCHAIN="${rv:-stable}"
fi

TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
# cross and cargo both resolve a relative CARGO_TARGET_DIR against the current directory ($ROOT).
[[ "$TARGET_DIR" = /* ]] || TARGET_DIR="$ROOT/$TARGET_DIR"

if [[ $USE_CROSS -eq 0 ]]; then
    command -v cargo >/dev/null || die "cargo not found"
    command -v rustup >/dev/null || die "rustup not found: the native path needs rustup to add the ARM standard libraries"
    installed="$(rustup target list --installed)"
    for t in "${TARGETS[@]}"; do
        if ! grep -qx "$t" <<<"$installed"; then
            [[ $INSTALL -eq 1 ]] || die "rust target $t not installed. Run: rustup target add $t"
            say "adding rust target: rustup target add $t"
            rustup target add "$t" >&2
        fi
        lb="$(linker_bin "$t")"
        command -v "$lb" >/dev/null || apt_install "linker $lb for $t" "$(linker_pkg "$t")"
        # The target's C library (crt1.o, libc.so) is only a Recommends of the gcc package.
        case "$t" in
            aarch64-unknown-linux-gnu) [[ -e /usr/aarch64-linux-gnu/lib/crt1.o ]] || apt_install "glibc for linking $t" libc6-dev-arm64-cross ;;
            armv7-unknown-linux-gnueabihf) [[ -e /usr/arm-linux-gnueabihf/lib/crt1.o ]] || apt_install "glibc for linking $t" libc6-dev-armhf-cross ;;
        esac
    done
fi
if [[ $QEMU -eq 1 ]]; then
    need=()
    for t in "${TARGETS[@]}"; do
        q="$(qemu_cmd "$t")"; q="${q%% *}"
        command -v "$q" >/dev/null || need+=(qemu-user)
        # qemu -L needs the target's glibc (the libc6-*-cross packages come with the cross gcc).
        case "$t" in
            aarch64-unknown-linux-gnu) [[ -e /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 ]] || need+=(libc6-arm64-cross) ;;
            armv7-unknown-linux-gnueabihf) [[ -e /usr/arm-linux-gnueabihf/lib/ld-linux-armhf.so.3 ]] || need+=(libc6-armhf-cross) ;;
        esac
    done
    if [[ ${#need[@]} -gt 0 ]]; then
        mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
        apt_install "to run the ARM binaries under emulation" "${need[@]}"
    fi
fi

# Boards have their own data: no bundled Fashion-MNIST subset (1.7 MB; `--data DIR` is needed).
cargo_args=(build --release -p edge-client --no-default-features)
[[ -n "$FEATURES" ]] && cargo_args+=(--features "$FEATURES")

# Strip tool for a target (only used if a binary comes out unstripped, e.g. a custom profile).
strip_bin() {
    case "$1" in
        aarch64-*) echo aarch64-linux-gnu-strip ;;
        armv7-*) echo arm-linux-gnueabihf-strip ;;
    esac
}

summary=()
status=0
for t in "${TARGETS[@]}"; do
    start=$(date +%s)
    if [[ $USE_CROSS -eq 1 ]]; then
        say "CROSS_CONFIG=cross/Cross.toml cross +$CROSS_TOOLCHAIN ${cargo_args[*]} --target $t ${EXTRA[*]:-}"
        CROSS_CONFIG="${CROSS_CONFIG:-$ROOT/cross/Cross.toml}" cross "+$CROSS_TOOLCHAIN" "${cargo_args[@]}" --target "$t" "${EXTRA[@]}"
    else
        # C build dependencies (cc crate): the musl target would look for aarch64-linux-musl-gcc,
        # which Debian does not ship; the glibc cross gcc compiles freestanding C fine.
        tu="${t//-/_}"
        cc_var="CC_${tu}"; ar_var="AR_${tu}"
        cc="${!cc_var:-$(linker_bin "$t")}"
        ar="${!ar_var:-${cc%-gcc}-ar}"
        say "cargo ${cargo_args[*]} --target $t ${EXTRA[*]:-}"
        env "CC_${tu}=$cc" "AR_${tu}=$ar" cargo "${cargo_args[@]}" --target "$t" "${EXTRA[@]}"
    fi
    secs=$(( $(date +%s) - start ))
    bin="$TARGET_DIR/$t/release/edge-client"
    [[ -f "$bin" ]] || die "build finished but $bin is missing"
    desc="$(file -b "$bin" 2>/dev/null || echo '?')"
    stripped="$bin"
    if ! grep -q ', stripped' <<<"$desc"; then
        sb="$(strip_bin "$t")"
        if command -v "$sb" >/dev/null; then
            stripped="$bin.stripped"
            "$sb" -o "$stripped" "$bin"
        else
            say "warning: $bin is not stripped and $sb is missing; size below is unstripped"
        fi
    fi
    size=$(stat -c %s "$stripped")
    mib=$(awk -v s="$size" 'BEGIN { printf "%.2f", s / 1048576 }')
    verdict="ok"
    if (( size > SIZE_LIMIT )); then verdict="OVER the 8 MiB target"; status=1; fi
    say "$t: $stripped"
    say "    $desc"
    say "    stripped size: $size bytes ($mib MiB, $verdict), build took ${secs}s"
    if [[ "$t" == *-gnu* ]]; then
        od="$(strip_bin "$t")"; od="${od%-strip}-objdump"
        if command -v "$od" >/dev/null; then
            glibc="$("$od" -T "$stripped" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
            say "    needs glibc >= ${glibc#GLIBC_} on the board"
        fi
    fi
    run="-"
    if [[ $QEMU -eq 1 ]]; then
        q="$(qemu_cmd "$t")"
        say "    $q $stripped --help"
        # shellcheck disable=SC2086
        if $q "$stripped" --help >/dev/null; then run="runs under ${q%% *}"
        else run="FAILED under ${q%% *}"; status=1; fi
        say "    $run"
    fi
    summary+=("$t|$stripped|$size|$mib|${secs}s|$run")
done

printf '\n%-32s %10s %8s %7s  %s\n' target bytes MiB build binary
for row in "${summary[@]}"; do
    IFS='|' read -r t path size mib secs run <<<"$row"
    printf '%-32s %10s %8s %7s  %s\n' "$t" "$size" "$mib" "$secs" "$path"
    [[ "$run" == "-" ]] || printf '%-32s %s\n' "" "$run"
done
exit $status
