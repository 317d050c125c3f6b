#!/usr/bin/env python3
"""Tabulates the per-operation device times that `sluice-train --op-times` logs.

Usage: scripts/bench/op_times.py LOG [--runs NAME ...] [--lane compute] [--top N] [--json]

LOG is a log holding "---- NAME" lines before each run (scripts/bench/gpu_train.sh writes them
to gpu_train.log) and the runs' "op times DEVICE: LANE NAME T ms in N calls" lines. For the
chosen runs (default: every run with op times) prints one Markdown table: per operation the
total milliseconds of each run's busiest device (the one with the largest sum on the lane), and
for two runs the ratio first / second, e.g. a one-GPU run against a two-GPU run. Operations
nested in others (GAT sub-kernels such as "gat_backward.edges") are listed as they are; their
parents' times include them. Standard library only.
"""
import argparse
import json
import re
import sys

RUN = re.compile(r"^---- (\S+)$")
OP = re.compile(r"op times (.+?): (\w+)\s+(.+?)\s+([0-9.]+) ms in\s+(\d+) calls")


def read_log(path):
    """{run: {device: {(lane, op): (ms, calls)}}}, runs in log order."""
    runs, current = {}, None
    with open(path, errors="replace") as f:
        for line in f:
            m = RUN.match(line.rstrip("\n"))
            if m:
                current = m.group(1)
                continue
            m = OP.search(line)
            if m and current is not None:
                device, lane, op, ms, calls = m.groups()
                runs.setdefault(current, {}).setdefault(device, {})[(lane, op)] = (
                    float(ms), int(calls))
    return runs


def busiest(devices, lane):
    """The device with the largest total time on `lane` (parents and sub-kernels counted once:
    names with a '.' are sub-kernels)."""
    def total(ops):
        return sum(ms for (l, op), (ms, _) in ops.items() if l == lane and "." not in op)
    name = max(devices, key=lambda d: total(devices[d]))
    return name, devices[name]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("log")
    parser.add_argument("--runs", nargs="+", help="run names (the '---- NAME' lines)")
    parser.add_argument("--lane", default="compute", help="compute, transfer or store")
    parser.add_argument("--top", type=int, default=0, help="only the N largest operations")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    runs = read_log(args.log)
    names = args.runs or list(runs)
    missing = [n for n in names if n not in runs]
    if missing:
        sys.exit(f"op_times: no op times for {', '.join(missing)} in {args.log} "
                 f"(runs with op times: {', '.join(runs) or 'none'})")
    if not names:
        sys.exit(f"op_times: no op times in {args.log} (run sluice-train with --op-times)")
    chosen = {n: busiest(runs[n], args.lane) for n in names}
    ops = {}
    for n in names:
        for (lane, op), (ms, calls) in chosen[n][1].items():
            if lane == args.lane:
                ops.setdefault(op, {})[n] = (ms, calls)
    order = sorted(ops, key=lambda op: -ops[op].get(names[0], (0.0, 0))[0])
    if args.top:
        order = order[:args.top]
    if args.json:
        print(json.dumps({"lane": args.lane,
                          "runs": {n: {"device": chosen[n][0],
                                       "ops": {op: {"ms": ops[op][n][0], "calls": ops[op][n][1]}
                                               for op in order if n in ops[op]}}
                                   for n in names}}, indent=1))
        return
    header = ["operation"] + [f"{n} ({chosen[n][0]}) ms" for n in names]
    if len(names) == 2:
        header.append("ratio")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for op in order:
        cells = [op] + [f"{ops[op][n][0]:.1f}" if n in ops[op] else "—" for n in names]
        if len(names) == 2:
            a, b = (ops[op].get(n, (0.0, 0))[0] for n in names)
            cells.append(f"{a / b:.2f}×" if a > 0 and b > 0 else "")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
