 /usr/bin/time -v  /work/target-cross/release/edge-client --help
