#!/bin/sh
# The `after` side of avx512-cohort10/ and avx512-cohort10-maxpool/: a release coordinator built
# with `--features avx512` ($AVX512_COORDINATOR, default target/6349b39-avx512/coordinator, the
# build of avx512-cohort10/), each simulate with `--cohort 10` (ten clients trained as one
# batched model).
exec "${AVX512_COORDINATOR:-target/6349b39-avx512/coordinator}" "$@" --cohort 10
