"""Does the fabric judgement name exactly the slow node and the slow pair, and never a healthy one?

Seven "nodes" that are network namespaces on one bridge of this host (tests/netns_nodes.py; needs root and
iproute2), one rank of workloads/fabric_pairs.py each over gloo. node6's link is limited to 1 Gbit/s both ways
(`tc` token bucket), and the traffic between node1 and node3 only is limited to 1 Gbit/s (HTB on each of the
two); every other pair runs as fast as the host's two cores let a veth bridge go, which varies a lot from round to
round when three pairs exchange at once. Each run measures every pair in rounds, measures the suspects again
alone (the confirmation), and fleet/fabric.py judges the result with its defaults.

    python3 benchmarks/fabric_accusations.py --runs 20

prints one line per run (who was named, what the confirmation cleared) and the tally; writes every run's figures
to benchmarks/fabric_accusations.last.json. Goal (issue 20): node6 and the pair node1-node3 named in every run,
nothing else ever named.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from netns_nodes import namespace_nodes, run_fabric_pairs  # noqa: E402

from pytest_gpufabric.fleet.fabric import judge_fabric  # noqa: E402

COUNT, SLOW_NODE, SLOW_PAIR, RATE = 7, 6, (1, 3), "1gbit"
PAIR_SIZE = 4 << 20


def scenario(workdir: Path, port: int = 29571) -> dict:
    """One run: the fabric result, what the judgement named, and how long it took."""
    result_path = workdir / "fabric.json"
    started = time.monotonic()
    with namespace_nodes(COUNT, slow={SLOW_NODE: RATE}, slow_pair=(*SLOW_PAIR, RATE)) as nodes:
        run_fabric_pairs(nodes, result_path, pair_size=PAIR_SIZE, iters=3, port=port)
    seconds = time.monotonic() - started
    result = json.loads(result_path.read_text(encoding="utf-8"))
    judged = judge_fabric(result, {})
    once = judge_fabric({**result, "confirmation": None}, {})  # the rule before the confirmation: rounds only
    return {"seconds": seconds, "result": result,
            "rounds_only": sorted([s["node"] for s in once["slow_nodes"]]
                                  + [f"{p['a']}-{p['b']}" for p in once["slow_pairs"]]),
            "slow_nodes": sorted(s["node"] for s in judged["slow_nodes"]),
            "slow_pairs": sorted(f"{p['a']}-{p['b']}" for p in judged["slow_pairs"]),
            "cleared": sorted(f"{p['a']}-{p['b']}" for p in judged["cleared_pairs"]),
            "suspects": result["confirmation"]["suspects"], "problems": judged["problems"]}


def expected() -> tuple[list[str], list[str]]:
    return [f"node{SLOW_NODE}"], [f"node{SLOW_PAIR[0]}-node{SLOW_PAIR[1]}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("fabric_accusations.last.json"))
    args = parser.parse_args()
    want_nodes, want_pairs = expected()
    runs, exact = [], 0
    for number in range(args.runs):
        with tempfile.TemporaryDirectory() as workdir:
            run = scenario(Path(workdir), port=29571 + number % 20)
        right = run["slow_nodes"] == want_nodes and run["slow_pairs"] == want_pairs
        exact += right
        cleared = ", ".join(run["cleared"]) or "none"
        print(f"run {number + 1:2d}: {run['seconds']:5.1f} s  named nodes {run['slow_nodes']} pairs "
              f"{run['slow_pairs']}  cleared by the confirmation: {cleared}  {'ok' if right else 'WRONG'}  "
              f"(the rounds alone would name: {', '.join(run['rounds_only'])})", flush=True)
        runs.append({k: v for k, v in run.items() if k != "result"} | {"pairs": run["result"]["pairs"]})
    falsely = sorted({n for r in runs for n in r["slow_nodes"] if n not in want_nodes}
                     | {p for r in runs for p in r["slow_pairs"] if p not in want_pairs})
    wrong_once = sum(1 for r in runs if r["rounds_only"] != sorted(want_nodes + want_pairs))
    print(f"\n{exact} of {args.runs} runs named exactly {want_nodes[0]} and the pair {want_pairs[0]}; "
          f"healthy nodes or pairs ever named: {', '.join(falsely) or 'none'}; "
          f"pairs the confirmation cleared: {sum(len(r['cleared']) for r in runs)} in all; "
          f"runs in which the rounds alone would have named something else: {wrong_once} of {args.runs}")
    args.out.write_text(json.dumps({"runs": runs, "exact": exact, "of": args.runs, "falsely_named": falsely},
                                   indent=1) + "\n", encoding="utf-8")
    return 0 if exact == args.runs else 1


if __name__ == "__main__":
    raise SystemExit(main())
