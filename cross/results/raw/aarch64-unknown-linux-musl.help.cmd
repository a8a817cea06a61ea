 /usr/bin/time -v qemu-aarch64 target/aarch64-unknown-linux-musl/release/edge-client --help
