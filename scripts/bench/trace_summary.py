#!/usr/bin/env python3
"""Summarizes one training step (or evaluation) of a Chrome trace from `sluice-train --trace`.

Usage: scripts/bench/trace_summary.py [--epoch N] [--evaluation] [--json] [--ops | --op-totals]
       trace.json ...

For the chosen step (host event "epoch N training step", N counted from 0 as in the trace;
default: the last one; with --evaluation the host event "epoch N evaluation" instead, whose
passes are "evaluate 0", "evaluate 1", ...) and the device ranges inside it, prints in
milliseconds: the wall time; per device the busy time per lane (union of ranges) and per phase
(sum of durations); per pass (forward 0, forward 1, backward 1, ...) and device the start, span, each lane's busy time
(the union of its ranges; a compute-lane range may hold waits for the other lanes' work),
head (first range to first compute), tail (last compute end to last range end) and compute-lane
idle time, the median host lead (a batch's compute start less the end of its issue on the
host, "issue" ranges of the host's second track) and the batches that waited for the host, and
the load time spent on the pass during the previous pass (the schedule prefetches
batch 0 of a pass during the last batch of the one before: a device's ranges that begin before
its own previous pass's compute ended count as "prefetched" and not in the pass's start, span
or head; loads of a pass that begin after a later pass's
first compute range are the next step's first blocks, counted apart); the gaps between passes; "host link busy" per device (union of load on the transfer
lane, store/flush on the store lane, load/flush on the compute lane; an approximation of the
ranges moving data over the host link) as a fraction of the wall time; and per pass, device and
batch the compute start, compute time and the wait before the compute range (since the previous
range end on the compute lane). --json prints the same numbers as one JSON object keyed by file.
--ops lists the step's operation ranges instead (a trace of --trace with --op-times), in time
order with each one's idle time on its lane before it. --op-totals sums them per pass and
operation for each device (milliseconds and calls), largest first, and each device's total
(ranges named "op.part" lie inside the range "op" and count only in their own row); with --json
as one JSON object keyed by file.
Standard library only.
"""
import argparse
import json
import os
import re
import signal
import sys

# A batch whose compute began within this long after the host finished issuing it waited for
# the host (a launch takes a few microseconds to reach the GPU).
HOST_BOUND_MS = 0.05
# The host event of a training step and of an evaluation (--evaluation).
STEPS = {False: re.compile(r"epoch (\d+) training step$"),
         True: re.compile(r"epoch (\d+) evaluation$")}
COMPUTE_LANE, TRANSFER_LANE, STORE_LANE, PEER_LANE = 0, 1, 2, 3
LANE_NAMES = {COMPUTE_LANE: "compute", TRANSFER_LANE: "transfer", STORE_LANE: "store",
              PEER_LANE: "peer"}
HOST_LINK = {TRANSFER_LANE: ("load",), STORE_LANE: ("store", "flush"), COMPUTE_LANE: ("load", "flush")}


def union(intervals):
    """Total length of the union of (begin, end) intervals."""
    total, start, end = 0.0, None, None
    for b, e in sorted(intervals):
        if end is None or b > end:
            if end is not None:
                total += end - start
            start, end = b, e
        else:
            end = max(end, e)
    return total + (end - start if end is not None else 0.0)


def read_trace(path):
    with open(path) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    devices, lanes = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            devices[e["pid"]] = e["args"]["name"]
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            lanes[(e["pid"], e["tid"])] = e["args"]["name"]
    complete = [e for e in events if e.get("ph") == "X"]
    host = [e for e in complete if e.get("cat") == "host"]
    # Operation ranges (--op-times with --trace) lie on tracks of their own, category "op ...".
    ranges = [e for e in complete if e.get("cat") != "host" and not is_operation(e)
              and not is_issue(e)]
    issues = [e for e in complete if is_issue(e)]
    return devices, lanes, host, ranges, issues


def is_issue(event):
    return event.get("cat", "").startswith("issue ")


def is_operation(event):
    return event.get("cat", "").startswith("op ")


def choose_step(host, epoch, path, evaluation):
    pattern = STEPS[evaluation]
    steps = sorted((e for e in host if pattern.match(e["name"])), key=lambda e: e["ts"])
    if epoch is not None:
        steps = [e for e in steps if int(pattern.match(e["name"]).group(1)) == epoch]
    if not steps:
        what = "evaluation" if evaluation else "training step"
        sys.exit(f"{path}: no 'epoch {'N' if epoch is None else epoch} {what}' host event")
    return steps[-1]


def summarize(path, epoch, evaluation=False):
    devices, lane_names, host, raw, raw_issues = read_trace(path)
    step = choose_step(host, epoch, path, evaluation)
    t0, wall = step["ts"], step["dur"]
    # When the host finished issuing each batch's compute: {(pass, batch): ms from the step start}.
    issued = {(e["cat"][len("issue "):], e["args"]["batch"]): (e["ts"] + e["dur"] - t0) / 1e3
              for e in raw_issues if t0 <= e["ts"] <= t0 + wall}
    ranges = []  # (device, lane, phase, batch, pass, begin ms, end ms), relative to the step start
    for e in raw:
        mid = e["ts"] + e["dur"] / 2
        if t0 <= mid <= t0 + wall:
            b = (e["ts"] - t0) / 1e3
            batch = e.get("args", {}).get("batch", int(e["name"].split()[-1]))
            ranges.append((e["pid"], e["tid"], e["name"].split()[0], batch, e["cat"], b,
                           b + e["dur"] / 1e3))
    ranges.sort(key=lambda r: (r[5], r[6]))
    wall /= 1e3
    device_ids = sorted({r[0] for r in ranges})
    out = {"file": path, "step": step["name"], "wall_ms": wall, "devices": [], "passes": [],
           "gaps": []}
    for d in device_ids:
        mine = [r for r in ranges if r[0] == d]
        lanes = {}
        for lane in sorted({r[1] for r in mine}):
            name = lane_names.get((d, lane), f"lane {lane}")
            lanes[name] = union([(r[5], r[6]) for r in mine if r[1] == lane])
        phases = {}
        for r in mine:
            phases[r[2]] = phases.get(r[2], 0.0) + r[6] - r[5]
        link = union([(r[5], r[6]) for r in mine if r[2] in HOST_LINK.get(r[1], ())])
        out["devices"].append({"device": d, "name": devices.get(d, f"device {d}"), "lanes": lanes,
                               "phases": phases, "host_link_busy_ms": link,
                               "host_link_busy_fraction": link / wall if wall else 0.0})
    pass_names = []
    for r in ranges:
        if r[4] not in pass_names:
            pass_names.append(r[4])
    # The step's last pass loads the next step's first blocks (the early next pass): loads of a
    # pass that begin after a later pass's first compute range are the next step's, not this
    # pass's.
    first_compute = {}
    for r in ranges:
        if r[2] == "compute":
            first_compute.setdefault(r[4], r[5])
    next_step = []
    for r in ranges:
        later = pass_names[pass_names.index(r[4]) + 1:]
        if r[2] in ("load", "p2p") and any(p in first_compute and r[5] >= first_compute[p]
                                          for p in later):
            next_step.append(r)
    ranges = [r for r in ranges if r not in next_step]
    out["next_step_loads_ms"] = sum(r[6] - r[5] for r in next_step)
    previous_end = {}  # device -> end of its previous pass's last compute-lane range
    for p in pass_names:
        # Passes run one after the other on each device's compute lane: a range of this pass
        # that begins before the device's previous pass's last compute-lane range ended was
        # prefetched during it (the previous pass's own transfers, as its last stores, may still
        # run beside this one). Each device's own: one device may begin a pass while another
        # still computes the previous one.
        early = [r for r in ranges
                 if r[4] == p and r[0] in previous_end and r[5] < previous_end[r[0]]]
        in_pass = [r for r in ranges if r[4] == p and r not in early]
        if not in_pass:
            continue
        entry = {"pass": p, "start_ms": min(r[5] for r in in_pass),
                 "end_ms": max(r[6] for r in in_pass), "devices": [],
                 "prefetched_ms": sum(r[6] - r[5] for r in early)}
        entry["span_ms"] = entry["end_ms"] - entry["start_ms"]
        for d in device_ids:
            lane0_ends = [r[6] for r in in_pass if r[0] == d and r[1] == COMPUTE_LANE]
            mine_ends = [r[6] for r in in_pass if r[0] == d]
            if lane0_ends or mine_ends:
                previous_end[d] = max(lane0_ends) if lane0_ends else max(mine_ends)
        for d in device_ids:
            mine = [r for r in in_pass if r[0] == d]
            if not mine:
                continue
            first, last = min(r[5] for r in mine), max(r[6] for r in mine)
            lane0 = [r for r in mine if r[1] == COMPUTE_LANE]
            computes = [r for r in mine if r[2] == "compute"]
            busy = union([(r[5], r[6]) for r in lane0])
            lane0_span = max(r[6] for r in lane0) - min(r[5] for r in lane0) if lane0 else 0.0
            dev = {"device": d, "start_ms": first, "span_ms": last - first,
                   "compute_lane_busy_ms": busy,
                   "transfer_lane_busy_ms": union([(r[5], r[6]) for r in mine
                                                   if r[1] == TRANSFER_LANE]),
                   "store_lane_busy_ms": union([(r[5], r[6]) for r in mine
                                                if r[1] == STORE_LANE]),
                   "head_ms": min(r[5] for r in computes) - first if computes else None,
                   "tail_ms": last - max(r[6] for r in computes) if computes else None,
                   "compute_lane_idle_ms": lane0_span - busy,
                   "prefetched_ms": sum(r[6] - r[5] for r in early if r[0] == d), "batches": []}
            step_lane0 = [r for r in ranges if r[0] == d and r[1] == COMPUTE_LANE]
            for batch in sorted({r[3] for r in computes}):
                mine_b = [r for r in computes if r[3] == batch]
                begin = min(r[5] for r in mine_b)
                before = [r[6] for r in step_lane0 if r[5] < begin and r not in mine_b]
                lead = begin - issued[(p, batch)] if (p, batch) in issued else None
                dev["batches"].append({"batch": batch, "start_ms": begin,
                                       "compute_ms": sum(r[6] - r[5] for r in mine_b),
                                       "wait_ms": begin - max(before, default=0.0),
                                       "host_lead_ms": lead})
            leads = sorted(b["host_lead_ms"] for b in dev["batches"]
                           if b["host_lead_ms"] is not None)
            dev["median_host_lead_ms"] = leads[len(leads) // 2] if leads else None
            dev["host_bound_batches"] = sum(lead < HOST_BOUND_MS for lead in leads)
            entry["devices"].append(dev)
        out["passes"].append(entry)
    for a, b in zip(out["passes"], out["passes"][1:]):
        out["gaps"].append({"from": a["pass"], "to": b["pass"], "gap_ms": b["start_ms"] - a["end_ms"]})
    if out["passes"]:
        out["before_first_pass_ms"] = out["passes"][0]["start_ms"]
        out["after_last_pass_ms"] = wall - out["passes"][-1]["end_ms"]
    return out


def rounded(x):
    if isinstance(x, float):
        return round(x, 4)
    if isinstance(x, dict):
        return {k: rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [rounded(v) for v in x]
    return x


def ms(x):
    return "-" if x is None else f"{x:.2f}"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def print_text(s):
    print(f"## {os.path.basename(s['file'])}: {s['step']}\n")
    print(f"Step wall time: {ms(s['wall_ms'])} ms\n")
    lanes = list(dict.fromkeys(lane for d in s["devices"] for lane in d["lanes"]))  # lane id order
    phases = [p for p in ("load", "p2p", "compute", "store", "flush")
              if any(p in d["phases"] for d in s["devices"])]
    phases += sorted({p for d in s["devices"] for p in d["phases"]} - set(phases))
    print("### Busy time per device (ms; lanes: union of ranges, phases: sum)\n")
    print(table(["device"] + lanes + phases + ["host link busy"],
                [[d["name"]] + [ms(d["lanes"].get(lane, 0.0)) for lane in lanes] +
                 [ms(d["phases"].get(p, 0.0)) for p in phases] +
                 [f"{ms(d['host_link_busy_ms'])} ({100 * d['host_link_busy_fraction']:.1f}%)"]
                 for d in s["devices"]]))
    print("\n### Passes (ms; start from the step start)\n")
    rows = []
    for p in s["passes"]:
        rows.append([p["pass"], "all", ms(p["start_ms"]), ms(p["span_ms"]), "", "", "", "", "",
                     "", ms(p["prefetched_ms"])])
        for d in p["devices"]:
            rows.append(["", d["device"], ms(d["start_ms"]), ms(d["span_ms"]),
                         ms(d["compute_lane_busy_ms"]), ms(d["transfer_lane_busy_ms"]),
                         ms(d["store_lane_busy_ms"]), ms(d["head_ms"]), ms(d["tail_ms"]),
                         ms(d["compute_lane_idle_ms"]), ms(d["prefetched_ms"]),
                         ms(d["median_host_lead_ms"]),
                         f"{d['host_bound_batches']}/{len(d['batches'])}"])
    print(table(["pass", "device", "start", "span", "compute busy", "transfer busy", "store busy",
                 "head", "tail",
                 "compute idle", "prefetched in the previous pass", "median host lead",
                 "batches waiting for the host"], rows))
    if s["passes"]:
        print("\n### Gaps between passes (ms)\n")
        rows = [["step start", s["passes"][0]["pass"], ms(s["before_first_pass_ms"])]]
        rows += [[g["from"], g["to"], ms(g["gap_ms"])] for g in s["gaps"]]
        rows.append([s["passes"][-1]["pass"], "step end", ms(s["after_last_pass_ms"])])
        print(table(["after", "before", "gap"], rows))
        total = sum(p["span_ms"] for p in s["passes"]) + sum(g["gap_ms"] for g in s["gaps"])
        print(f"\nPass spans + gaps: {ms(total)} ms of {ms(s['wall_ms'])} ms wall "
              f"(after the last pass, optimizer etc.: {ms(s['after_last_pass_ms'])} ms); "
              f"loads for the next step's first pass: {ms(s['next_step_loads_ms'])} ms")
    for p in s["passes"]:
        print(f"\n### Batches of {p['pass']} (ms; wait: since the previous compute-lane range; "
              "host lead: compute start less the end of its issue on the host)\n")
        print(table(["device", "batch", "compute start", "compute", "wait", "host lead"],
                    [[d["device"], b["batch"], ms(b["start_ms"]), ms(b["compute_ms"]),
                      ms(b["wait_ms"]), ms(b["host_lead_ms"])]
                     for d in p["devices"] for b in d["batches"]]))
    print()


def operation_ranges(path, epoch, evaluation):
    """The chosen step and its operation ranges, in time order."""
    with open(path) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    complete = [e for e in events if e.get("ph") == "X"]
    step = choose_step([e for e in complete if e.get("cat") == "host"], epoch, path, evaluation)
    t0, t1 = step["ts"], step["ts"] + step["dur"]
    ops = sorted((e for e in complete if is_operation(e) and t0 <= e["ts"] <= t1),
                 key=lambda e: e["ts"])
    if not ops:
        sys.exit(f"{path}: no operation ranges in {step['name']} (run with --trace and --op-times)")
    return step, ops


def operation_totals(path, epoch, evaluation=False):
    """Per pass and operation, each device's summed milliseconds and calls, largest first; and
    each device's total over the ranges that lie in no other (names without a '.')."""
    step, ops = operation_ranges(path, epoch, evaluation)
    per_op = {}
    for e in ops:
        device = per_op.setdefault((e["cat"][3:], e["name"]), {}).setdefault(
            str(e["pid"]), {"ms": 0.0, "calls": 0})
        device["ms"] += e["dur"] / 1e3
        device["calls"] += 1
    devices = sorted({str(e["pid"]) for e in ops}, key=int)
    rows = [{"pass": p, "operation": name, "devices": per}
            for (p, name), per in per_op.items()]
    rows.sort(key=lambda r: (-sum(d["ms"] for d in r["devices"].values()), r["pass"],
                             r["operation"]))
    totals = {d: sum(r["devices"][d]["ms"] for r in rows
                     if d in r["devices"] and "." not in r["operation"]) for d in devices}
    return {"file": path, "step": step["name"], "step_ms": step["dur"] / 1e3, "devices": devices,
            "operations": rows, "device_totals_ms": totals}


def print_operation_totals(t):
    print(f"## {os.path.basename(t['file'])}: {t['step']}, {t['step_ms']:.2f} ms\n")
    header = " | ".join(f"device {d} ms (calls)" for d in t["devices"])
    print(f"| pass | operation | {header} |")
    print("|---|---|" + "---|" * len(t["devices"]))
    for r in t["operations"]:
        cells = " | ".join(
            f"{r['devices'][d]['ms']:.3f} ({r['devices'][d]['calls']})" if d in r["devices"]
            else "" for d in t["devices"])
        print(f"| {r['pass']} | {r['operation']} | {cells} |")
    cells = " | ".join(f"{t['device_totals_ms'][d]:.3f}" for d in t["devices"])
    print(f"| all | every operation | {cells} |\n")


def print_operations(path, epoch, evaluation=False):
    """The chosen step's operation ranges: start and duration (ms from the step start), device,
    lane, pass and name, and per lane the idle time before the range."""
    step, ops = operation_ranges(path, epoch, evaluation)
    t0 = step["ts"]
    print(f"## {os.path.basename(path)}: {step['name']}, {step['dur'] / 1e3:.2f} ms\n")
    print("| start | ms | idle before | device | lane | pass | operation |")
    print("|---|---|---|---|---|---|---|")
    lane_end = {}
    for e in ops:
        key = (e["pid"], e["tid"])
        idle = (e["ts"] - lane_end[key]) / 1e3 if key in lane_end else 0.0
        lane_end[key] = max(lane_end.get(key, 0), e["ts"] + e["dur"])
        lane = LANE_NAMES.get(e["tid"] % len(LANE_NAMES), str(e["tid"]))
        print(f"| {(e['ts'] - t0) / 1e3:.2f} | {e['dur'] / 1e3:.3f} | {max(idle, 0):.2f} | "
              f"{e['pid']} | {lane} | {e['cat'][3:]} | {e['name']} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("traces", nargs="+", help="Chrome trace JSON from sluice-train --trace")
    parser.add_argument("--epoch", type=int, help="epoch N (from 0) of 'epoch N training step'")
    parser.add_argument("--evaluation", action="store_true",
                        help="summarize the evaluation 'epoch N evaluation' instead of the step")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--ops", action="store_true",
                      help="list the step's operation ranges in time order instead (traces of "
                      "sluice-train --trace with --op-times)")
    kind.add_argument("--op-totals", action="store_true",
                      help="sum the step's operation ranges per pass, operation and device "
                      "instead")
    args = parser.parse_args()
    if args.ops:
        for path in args.traces:
            print_operations(path, args.epoch, args.evaluation)
        return
    if args.op_totals:
        make, show = operation_totals, print_operation_totals
    else:
        make, show = summarize, print_text
    results = [make(path, args.epoch, args.evaluation) for path in args.traces]
    if args.json:
        print(json.dumps({r["file"]: rounded(r) for r in results}, indent=1))
    else:
        for r in results:
            show(r)


if __name__ == "__main__":
    # Piped into head: end quietly when the reader closes the pipe.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    main()
