EDGECFL_FMNIST_DIR=/usr/share/datasets/fashion-mnist /usr/bin/time -v  target/release/edge-client bench --model lenet5 --backends flex --batches 10 --samples 600 --repeats 3
