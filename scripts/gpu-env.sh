# Sourced by the device-side GPU scripts (scripts/gpu-*.sh), run on
# the GPU machine from the repository root. Sets BIN (a release `coordinator` built with
# `--features vulkan`, default .bin/coordinator), DATA (Fashion-MNIST's IDX files, default .fmnist)
# and OUT (where results go, default $1); makes Vulkan work on an NVIDIA server without a display;
# writes $OUT/gpu.txt (nvidia-smi's name, driver and memory; the host's CPU) and defines
#   run CMD...                     CMD, its command line logged to $OUT/log.txt
#   sim NAME DEVICE SECONDS ARGS…  `coordinator simulate ARGS --seed 0 --device DEVICE`, at most
#                                  SECONDS, timed by bash's `time`; its command, final line and
#                                  wall time appended to $OUT/simulate.txt, its log to log.txt,
#                                  its results to results/NAME-DEVICE
#   cohorts SECONDS CLIENTS ARGS…  `coordinator bench --devices vulkan --cohorts CLIENTS --batch 10
#                                  --samples 600 --repeats 3 ARGS` into $OUT/cohort-vulkan.json,
#                                  then the PyTorch peer (scripts/torch_cohort_bench.py, the same
#                                  clients and batch) into $OUT/torch-vmap.jsonl; exit codes to log
BIN=${BIN:-.bin/coordinator}
DATA=${DATA:-.fmnist}
OUT=${OUT:-$1}
mkdir -p "$OUT"
# The Vulkan loader and libglvnd (the NVIDIA ICD, libGLX_nvidia, needs libGLdispatch): Debian's
# libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2, downloaded as .debs.
# Absent for the libtorch scripts (scripts/gpu-tch.sh).
for f in .gl/*.deb; do [ -e "$f" ] && dpkg -x "$f" /; done
ldconfig
[ -e /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ] &&
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
log="$OUT/log.txt"
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    grep -m1 'model name' /proc/cpuinfo
    echo "cores: $(nproc)"
    # Whether the host's CPU has AVX-512 (BENCHMARKS §3: what the edge client's margin over
    # PyTorch on the CPU turns on).
    echo "avx512f: $(grep -q ' avx512f' /proc/cpuinfo && echo yes || echo no)"
} >"$OUT/gpu.txt" 2>&1
run() { echo "+ $*" >>"$log"; "$@"; }
sim() {
    local name=$1 dev=$2 limit=$3
    shift 3
    {
        echo "+ coordinator simulate $* --seed 0 --device $dev"
        echo "+ coordinator simulate $* --seed 0 --device $dev" >>"$log"
        TIMEFORMAT="wall %R s"
        time (timeout "$limit" "$BIN" simulate "$@" --seed 0 --device "$dev" --data "$DATA" \
            --out "results/$name-$dev" 2>>"$log" | tail -1)
    } >>"$OUT/simulate.txt" 2>&1
}
cohorts() {
    local limit=$1 clients=$2
    shift 2
    run timeout "$limit" "$BIN" bench --devices vulkan --cohorts "$clients" --batch 10 \
        --samples 600 --repeats 3 --data "$DATA" "$@" >"$OUT/cohort-vulkan.json" 2>>"$log"
    echo "rc $?" >>"$log"
    run timeout 60 python3 scripts/torch_cohort_bench.py --device cuda --clients "$clients" \
        --batch 10 >"$OUT/torch-vmap.jsonl" 2>>"$log"
    echo "rc $?" >>"$log"
}
