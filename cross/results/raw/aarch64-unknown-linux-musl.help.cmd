 /usr/bin/time -v qemu-aarch64 /work/target-cross/aarch64-unknown-linux-musl/release/edge-client --help
