#!/bin/sh
# The `after` side of avx512-cohort10/: the release coordinator of 6349b39 built with
# `--features avx512`, each simulate with `--cohort 10` (ten clients trained as one batched model).
exec target/6349b39-avx512/coordinator "$@" --cohort 10
