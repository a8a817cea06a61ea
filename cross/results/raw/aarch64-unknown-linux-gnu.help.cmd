 /usr/bin/time -v qemu-aarch64 -L /usr/aarch64-linux-gnu /work/target-cross/aarch64-unknown-linux-gnu/release/edge-client --help
