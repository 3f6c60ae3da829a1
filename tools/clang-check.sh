#!/usr/bin/env bash
# Compiles the C core with clang, for x86-64 and for aarch64, warnings as errors: Apple's
# compiler is clang, and the kernels must build there as they do with gcc.
#
#   tools/clang-check.sh           every csrc/*.c, -Wall -Wextra -Werror, both targets
#   tools/clang-check.sh --test    ... then builds the extension with clang (CC=clang) in a
#                                  scratch copy and runs the kernel tests on it, natively
#
# Installs clang and its OpenMP headers (Debian's clang and libomp-dev, as root) when missing;
# the aarch64 target takes its C library headers from libc6-dev-arm64-cross, found through
# gcc-aarch64-linux-gnu, which tools/arm64-test.sh installs (installed here too if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf 'clang-check: %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

need=()
command -v clang >/dev/null || need+=(clang)
[ -n "$(find /usr/lib/llvm-*/lib/clang -name omp.h 2>/dev/null | head -1)" ] || need+=(libomp-dev)
[ -d /usr/aarch64-linux-gnu/include ] || need+=(libc6-dev-arm64-cross)
# clang finds the aarch64 C library's headers through the cross gcc's installation: without
# it, it falls back to the host's /usr/include and fails on bits/libc-header-start.h
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
if [ ${#need[@]} -gt 0 ]; then
    say "installing ${need[*]}"
    as_root apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi
say "$(clang --version | head -1)"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
for target in x86_64-linux-gnu aarch64-linux-gnu; do
    n=0
    for f in csrc/*.c; do
        clang --target=$target -std=c11 -O3 -fno-math-errno -falign-loops=64 -fopenmp -Wall -Wextra -Werror \
            -Icsrc -c "$f" -o "$out/$(basename "$f" .c).o" || status=1
        n=$((n + 1))
    done
    # the kernel tables each target must define, and whether its SIMD kernels are in them
    syms=$(nm "$out"/kern_*.o 2>/dev/null | awk '$2 == "D" || $2 == "R" {print $3}' | sort | tr '\n' ' ')
    simd=$(nm "$out"/kern_*.o | grep -cE ' t (qk|pv)_(avx2|avx512|neon)_f32$' || true)
    say "$target: $n files compiled; tables: $syms; SIMD qk/pv kernels: $simd"
done
[ $status = 0 ] || { say "FAILED"; exit $status; }

if [ "${1:-}" = --test ]; then
    work=$(mktemp -d)
    trap 'rm -rf "$out" "$work"' EXIT
    git ls-files -co --exclude-standard -z | tar --null -cf - -T - | tar -xf - -C "$work"
    say "building the extension with clang in $work"
    (cd "$work" && CC=clang LDSHARED="clang -shared" python setup.py -q build_ext --inplace >/dev/null)
    (cd "$work" && python -m pytest -q -p no:cacheprovider tests/test_attention.py \
        tests/test_masks.py tests/test_decode.py tests/test_backward.py \
        tests/test_float16_cache.py tests/test_merge.py tests/test_linear.py tests/test_exp.py \
        tests/test_adversarial.py tests/test_nan_policy.py)
fi
say "ok"
