"""Build of attncore's one extension: csrc/*.c and attncore/_core.pyx.

Environment switches:
  ATTNCORE_OPENMP=0      build without OpenMP (single-threaded core)
  ATTNCORE_NATIVE=1      add -march=native (off by default: the wheel must run anywhere)
  ATTNCORE_DEBUG=1       -O0 -g and Cython bounds checks back on
  ATTNCORE_SANITIZE=1    AddressSanitizer and UndefinedBehaviorSanitizer (-O1 -g); load it
                         with LD_PRELOAD=$(gcc -print-file-name=libasan.so), as
                         tests/test_sanitizers.py does
"""

import os
import sys
from glob import glob

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup


def flag(name, default):
    return os.environ.get(name, default).strip().lower() not in ("0", "", "no", "off", "false")


debug = flag("ATTNCORE_DEBUG", "0")
sanitize = flag("ATTNCORE_SANITIZE", "0")
cflags = ["-std=c11", "-O0" if debug else "-O1" if sanitize else "-O3", "-fno-math-errno"]
if debug:
    cflags.append("-g")
else:
    # Every loop's start on a 64-byte line.  The kernels' speed hung on where their hot loops
    # fell against those lines: identical scalar kernels, moved 16 bytes by a change elsewhere,
    # took 7-16 % longer (tools/ab.py).  Aligned, a change to one kernel no longer moves another's.
    cflags.append("-falign-loops=64")
ldflags = []
if sanitize:
    san = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]
    cflags += ["-g", "-fno-omit-frame-pointer", *san]
    ldflags += san
if flag("ATTNCORE_NATIVE", "0"):
    cflags.append("-march=native")
if flag("ATTNCORE_OPENMP", "1"):
    if sys.platform == "darwin":
        omp = (["-Xpreprocessor", "-fopenmp"], ["-lomp"])
    elif sys.platform == "win32":
        omp = (["/openmp"], [])
    else:
        omp = (["-fopenmp"], ["-fopenmp"])
    cflags += omp[0]
    ldflags += omp[1]
print(f"attncore build: cflags={' '.join(cflags)} ldflags={' '.join(ldflags)}")

ext = Extension(
    "attncore._core",
    sources=["attncore/_core.pyx", *sorted(glob("csrc/*.c"))],
    # the bodies and kernels every unit includes: an edited header rebuilds them
    depends=sorted(glob("csrc/*.h")) + ["attncore/_capi.pxd"],
    include_dirs=["csrc", np.get_include()],
    define_macros=[
        ("NPY_NO_DEPRECATED_API", "NPY_2_0_API_VERSION"),
        ("ATTNCORE_CFLAGS", '"' + " ".join(cflags) + '"'),
    ],
    extra_compile_args=cflags,
    extra_link_args=ldflags,
)

setup(
    ext_modules=cythonize(
        [ext],
        language_level=3,
        compiler_directives={
            "boundscheck": debug,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": debug,
        },
    )
)
