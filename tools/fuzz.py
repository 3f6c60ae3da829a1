"""The differential fuzz of the public API (tests/fuzzing.py), for minutes.

    python tools/fuzz.py                       5 minutes, fresh seeds
    python tools/fuzz.py --minutes 30
    python tools/fuzz.py --seed 1234 --examples 500 --entry attention --isa avx2

Rounds of --examples calls each, every round on the next ISA and with its own
seed, until the time is up.  On a failure it prints the seed, the ISA, the
entry point, the failing call (hypothesis shrinks it first) and the command
that replays that round, and exits 1.
"""

import argparse
import os
import random
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402

import attncore  # noqa: E402
from attncore import _isa  # noqa: E402
from fuzzing import ENTRY_POINTS, calls, check  # noqa: E402


def one_round(entry, n_examples, round_seed):
    @seed(round_seed)
    @settings(max_examples=n_examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), print_blob=True)
    @given(calls(entry))
    def fuzz(call):
        check(call)

    fuzz()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--examples", type=int, default=300, help="calls per round")
    ap.add_argument("--seed", type=int, help="replay one round with this seed, then stop")
    ap.add_argument("--entry", choices=ENTRY_POINTS, help="one entry point (default: all, in turn)")
    ap.add_argument("--isa", choices=_isa.available(), help="one ISA (default: all, in turn)")
    args = ap.parse_args()

    isas = [args.isa] if args.isa else _isa.available()
    entries = [args.entry] if args.entry else list(ENTRY_POINTS)
    seeds = random.SystemRandom()
    end = time.monotonic() + 60 * args.minutes
    rounds = total = 0
    print(f"attncore {attncore.__version__}: fuzzing {', '.join(entries)} on {', '.join(isas)}",
          flush=True)
    while True:
        isa, entry = isas[rounds % len(isas)], entries[rounds // len(isas) % len(entries)]
        round_seed = args.seed if args.seed is not None else seeds.randrange(2**32)
        _isa.use(isa)
        try:
            one_round(entry, args.examples, round_seed)
        except Exception:  # noqa: BLE001 - any failure is reported with its seed
            traceback.print_exc()
            print(f"\nFAILED: seed {round_seed}, isa {isa}, entry {entry}\n"
                  f"replay: python {sys.argv[0]} --seed {round_seed} "
                  f"--entry {entry} --isa {isa} --examples {args.examples}", flush=True)
            sys.exit(1)
        rounds += 1
        total += args.examples
        left = end - time.monotonic()
        print(f"round {rounds}: {entry} on {isa}, seed {round_seed}: ok "
              f"({total} calls, {max(left, 0):.0f} s left)", flush=True)
        if args.seed is not None or left <= 0:
            break
    print(f"fuzz: {rounds} rounds, {total} calls, no disagreement")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
