 /usr/bin/time -v  target/notune/release/edge-client --help
