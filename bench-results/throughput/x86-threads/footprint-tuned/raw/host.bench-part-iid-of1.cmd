 /usr/bin/time -v  target/release/edge-client bench --model lenet5 --backends flex --batches 10 --samples 600 --repeats 3 --data /usr/share/datasets/fashion-mnist --partition iid --of 1 --index 0
