#!/usr/bin/env bash
# Times the micro-kernels of every ISA this CPU has on one blockwise tile, one
# thread, against that thread's FMA roof (tools/kernel_timing.c says how).
#   tools/kernel-timing.sh [bq bk d n]      default: 128 128 64 4096
# Builds the C core with the flags the package uses; needs only gcc.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)/kernel_timing
gcc -std=c11 -O3 -fno-math-errno -falign-loops=64 -fopenmp -Icsrc -o "$out" tools/kernel_timing.c csrc/*.c -lm
OMP_NUM_THREADS=1 "$out" "$@"
