 /usr/bin/time -v qemu-arm -L /usr/arm-linux-gnueabihf target/armv7-unknown-linux-gnueabihf/release/edge-client --help
