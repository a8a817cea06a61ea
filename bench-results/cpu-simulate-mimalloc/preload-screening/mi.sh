#!/bin/sh
LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libmimalloc.so.2 exec target/6678f00/coordinator "$@"
