 /usr/bin/time -v  target/release/edge-client.stripped --help
