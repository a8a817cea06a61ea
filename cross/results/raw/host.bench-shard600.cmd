EDGECFL_FMNIST_DIR=/work/snap2/cross/results/shard600 /usr/bin/time -v  /work/target-cross/release/edge-client bench --model lenet5 --backends flex --batches 10 --samples 600 --repeats 3
