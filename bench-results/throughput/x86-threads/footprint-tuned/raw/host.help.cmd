 /usr/bin/time -v  target/release/edge-client --help
