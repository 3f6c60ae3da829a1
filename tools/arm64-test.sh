#!/usr/bin/env bash
# Builds attncore for aarch64 on an x86-64 Debian machine and runs its kernel tests under
# qemu user-mode emulation, once per emulated core.
#
#   tools/arm64-test.sh                      the kernel tests, the API fuzz and the other tests
#                                            of the core, on cortex-a72 and neoverse-n1
#   ARM64_CPUS=neoverse-n1 tools/arm64-test.sh tests/test_exp.py -x     other cores, other tests
#   tools/arm64-test.sh -x                   options alone keep the default test list
#   ATTNCORE_TEST_ISAS=neon tools/arm64-test.sh   the `isa` fixture on neon only (what CI runs)
#
# The cores run side by side, one emulator process each.  Tests that cannot run emulated (another
# interpreter started, interrupt deadlines, the tour) carry a marker and are listed as skipped.
# What it sets up, once, in ARM64_CACHE (default ~/.cache/attncore-arm64), and reuses after:
#   - host packages (apt-get, as root): the aarch64 cross compiler and qemu-user;
#   - sysroot/: an arm64 CPython 3.11 and the libraries it needs, unpacked from Debian's arm64
#     packages (apt-get download + dpkg -x; nothing arm64 is installed on the host);
#   - site/: aarch64 wheels of numpy, ml_dtypes, pytest and hypothesis (pip --target, --platform);
#   - buildenv/: a host venv with the build requirements, for the cross build.
# Every run cross-builds a wheel from the working tree (tracked and untracked files that git does
# not ignore) with the project's own setup.py, repairs it to a manylinux tag with auditwheel (as
# tools/wheel-test.sh does for x86-64; wheeltools/ holds it) and installs that wheel into pkg/,
# so the tests run the code as it is now, installed as a release would be.  Needs python3.11 on
# the host (the build must match the target's ABI).
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${ARM64_CACHE:-$HOME/.cache/attncore-arm64}
cpus=${ARM64_CPUS:-cortex-a72 neoverse-n1}
py=python3.11
mkdir -p "$cache"
start=$SECONDS
say() { printf 'arm64-test: [%ss] %s\n' "$((SECONDS - start))" "$*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
command -v "$py" >/dev/null || { say "needs $py on the host"; exit 2; }

# 1. the cross compiler and the emulator
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
    say "installing gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user"
    as_root apt-get install -y -q --no-install-recommends \
        gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user >/dev/null
fi

# 2. an arm64 CPython, unpacked into a sysroot
sysroot=$cache/sysroot
if [ ! -x "$sysroot/usr/bin/python3.11" ]; then
    say "unpacking an arm64 CPython 3.11 into $sysroot"
    debs=$cache/debs
    mkdir -p "$debs"
    added=0
    if ! dpkg --print-foreign-architectures | grep -qx arm64; then
        as_root dpkg --add-architecture arm64
        added=1
    fi
    as_root apt-get update -q >/dev/null
    pkgs="libc6 libgcc-s1 libstdc++6 libgomp1 libexpat1 zlib1g libffi8 libbz2-1.0 liblzma5
          libuuid1 libcrypt1 libssl3 libsqlite3-0 libncursesw6 libtinfo6 libreadline8
          python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libpython3.11-dev"
    (cd "$debs" && apt-get download -q $(for p in $pkgs; do echo "$p:arm64"; done) >/dev/null)
    if [ "$added" = 1 ]; then  # leave the host's package lists as they were
        as_root dpkg --remove-architecture arm64
        as_root apt-get update -q >/dev/null
    fi
    rm -rf "$sysroot.tmp"
    mkdir -p "$sysroot.tmp"
    for f in "$debs"/*.deb; do dpkg -x "$f" "$sysroot.tmp"; done
    mv "$sysroot.tmp" "$sysroot"
fi

# 3. aarch64 wheels of what the tests import.  pip does not widen a manylinux_2_N tag to the
# older ones by itself, so they are listed.
site=$cache/site
if [ ! -d "$site/numpy" ] || [ ! -d "$site/ml_dtypes" ]; then
    say "installing aarch64 wheels of numpy, ml_dtypes, pytest and hypothesis into $site"
    rm -rf "$site" "$site.tmp"
    plat=()
    for t in manylinux_2_28 manylinux_2_27 manylinux_2_26 manylinux_2_17 manylinux2014; do
        plat+=(--platform "${t}_aarch64")
    done
    "$py" -m pip install -q --target "$site.tmp" --python-version 3.11 --implementation cp \
        --abi cp311 --only-binary=:all: "${plat[@]}" "numpy>=1.25" ml_dtypes pytest hypothesis
    mv "$site.tmp" "$site"
fi
numpy_version=$(cd "$site" && ls -d numpy-*.dist-info | sed 's/numpy-\(.*\)\.dist-info/\1/')

# 4. the build requirements on the host, numpy the same release as the target's
buildenv=$cache/buildenv
if [ ! -x "$buildenv/bin/python" ] || ! "$buildenv/bin/python" -c \
    "import numpy, sys; sys.exit(numpy.__version__ != '$numpy_version')" 2>/dev/null; then
    say "creating the build venv $buildenv"
    rm -rf "$buildenv"
    "$py" -m venv "$buildenv"
    "$buildenv/bin/pip" install -q "setuptools>=77" "cython>=3.1" wheel "numpy==$numpy_version"
fi

# 5. the cross build, from a copy of the working tree
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git ls-files -co --exclude-standard -z | tar --null -cf - -T - | tar -xf - -C "$work"
cfg=$work/.sysconfig
mkdir -p "$cfg"
cp "$sysroot/usr/lib/python3.11/_sysconfigdata__aarch64-linux-gnu.py" "$cfg/"
say "set up; cross-building the wheel"
(cd "$work" && _PYTHON_HOST_PLATFORM=linux-aarch64 \
    _PYTHON_SYSCONFIGDATA_NAME=_sysconfigdata__aarch64-linux-gnu PYTHONPATH="$cfg" \
    CFLAGS="-I$sysroot/usr/include/python3.11 -I$sysroot/usr/include" \
    "$buildenv/bin/python" -m pip wheel -q --no-build-isolation --no-deps -w dist . >/dev/null)
# repaired to a manylinux tag as a release would be (auditwheel, from the `wheel` extra, in a
# venv of its own, finding the aarch64 libgomp in the sysroot), and installed from that wheel
wheeltools=$cache/wheeltools
if [ ! -x "$wheeltools/bin/auditwheel" ]; then
    python3 -m venv "$wheeltools"
    "$wheeltools/bin/pip" install -q $(python3 -c "import tomllib; print(' '.join(tomllib.load(
        open('pyproject.toml', 'rb'))['project']['optional-dependencies']['wheel']))")
fi
PATH="$wheeltools/bin:$PATH" \
    LD_LIBRARY_PATH="$sysroot/usr/lib/aarch64-linux-gnu:$sysroot/lib/aarch64-linux-gnu" \
    "$wheeltools/bin/auditwheel" repair -w "$work/wheelhouse" "$work"/dist/*.whl >/dev/null 2>&1
wheel=$(ls "$work"/wheelhouse/*.whl)
plat=$(basename "$wheel" .whl | sed 's/.*-//')  # manylinux_2_N_aarch64
say "repaired: $(basename "$wheel")"
pkg=$cache/pkg
rm -rf "$pkg"
"$buildenv/bin/pip" install -q --no-deps --target "$pkg" --platform "$plat" \
    --python-version 3.11 --implementation cp --abi cp311 --only-binary=:all: \
    "$wheel"

# 6. the tests, under each emulated core.  -P keeps the source tree (which has no compiled
# module) off sys.path; the tests import the installed package.
paths=0
for a in "$@"; do case $a in -*) ;; *) paths=1 ;; esac; done
if [ $paths = 0 ]; then  # options alone (-x, -rs, -q) go with the default list
    set -- "$@" tests/test_attention.py tests/test_masks.py tests/test_decode.py \
        tests/test_backward.py tests/test_float16_cache.py tests/test_half_inputs.py \
        tests/test_int8_cache.py tests/test_merge.py \
        tests/test_linear.py tests/test_exp.py tests/test_adversarial.py tests/test_nan_policy.py \
        tests/test_fuzz.py tests/test_properties.py tests/test_errors.py tests/test_kvcache.py \
        tests/test_mha.py tests/test_plain.py tests/test_threads.py tests/test_interrupt.py \
        tests/test_tour.py
fi
# The cores run side by side (each emulator is one process), each into its own log, shown
# when it ends.  ATTNCORE_EMULATED marks the run for the tests that cannot run emulated (they
# skip and say why); hypothesis takes the "emulated" profile (fewer examples) unless told.
logs=$(mktemp -d)
trap 'rm -rf "$work" "$logs"' EXIT
pids=()
for cpu in $cpus; do
    say "pytest on an emulated $cpu (ISAs: ${ATTNCORE_TEST_ISAS:-all this build has})"
    QEMU_CPU=$cpu QEMU_LD_PREFIX=$sysroot PYTHONPATH="$pkg:$site" \
        ATTNCORE_EMULATED="qemu-aarch64 $cpu" HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-emulated} \
        qemu-aarch64 "$sysroot/usr/bin/python3.11" -P -m pytest -q -p no:cacheprovider -rs "$@" \
        >"$logs/$cpu.log" 2>&1 &
    pids+=($!)
done
status=0
i=0
for cpu in $cpus; do
    rc=0
    wait "${pids[$i]}" || rc=$?
    i=$((i + 1))
    say "---- $cpu (exit $rc)"
    cat "$logs/$cpu.log"
    [ $rc = 0 ] || status=$rc
done
exit $status
