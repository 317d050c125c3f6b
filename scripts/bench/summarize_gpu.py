#!/usr/bin/env python3
"""Turns the JSON collected by scripts/bench/gpu_train.sh into Markdown for docs/benchmarks.md.

Inputs: --runs gpu_runs.jsonl (one line per sluice-train run: name, dataset, model, gpus, comm,
gpu_memory, rc, report, metrics), --pyg pyg.jsonl (scripts/bench/pyg_full_graph.py lines),
--datasets datasets.jsonl (info --json, working set, cap). Per run: median epoch time over the
epochs after the first (warm-up), the median evaluation time of those epochs (EVAL_EVERY=1; the
first, which fills the evaluation cache, left out) and its ratio to the epoch, mean phase breakdown and bytes per path over those epochs,
host-link busy % = H2D bytes moved in load phases / (load time x 55 GB/s x GPUs) (phase times are
device time per lane, the slowest device's: with overlap the load phase holds the gathers and the
backward's block prefetches; without it only the gathers, blocks loading inside compute), host-link
busy over the epoch = (H2D + D2H bytes) / (s/epoch x 55 GB/s x GPUs), speedup of 2 GPUs over 1 GPU (same
dataset, model and cap), ratio PyG time / Sluice time (> 1: Sluice faster), and whether the
three --comm modes are ordered baseline >= p2p >= p2p+reuse. With --traces DIR (the --trace
files of gpu_train.sh TRACE=1, DIR/NAME.json), also per run and device the host link's busy time
in the last epoch by the timeline (scripts/bench/trace_summary.py: union of the ranges that move
data over the link) and the rate while busy ((H2D + D2H bytes) / busy time).
"""
import argparse
import json
import os
import re
import statistics
import sys

LINK = 55e9  # host->GPU cudaMemcpy, pinned, per GPU (HARDWARE.md)


def read_lines(path):
    rows = []
    try:
        for line in open(path):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # log lines mixed into a results file
    except FileNotFoundError:
        pass
    return rows


def timed(metrics):
    return metrics[1:] if len(metrics) > 1 else metrics


def mean(values):
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def fmt_s(x):
    return f"{x:.3f} s" if x >= 0.1 else f"{x * 1000:.1f} ms"


def gb(x):
    return f"{x / 1e9:.2f}"


def run_stats(run):
    ms = timed(run.get("metrics", []))
    if not ms:
        return None
    seconds = statistics.median(m["seconds"] for m in ms)
    phases = {k: mean(m["phases"].get(k, 0.0) for m in ms)
              for k in ("load", "p2p", "compute", "store", "flush", "optimizer")}
    t = {k: mean(m["transfers"][k] for m in ms) for k in ms[0]["transfers"]}
    gpus = max(1, run["gpus"])
    loaded = t["h2d_gather_bytes"] + (t["h2d_block_bytes"] if run.get("overlap", 1) else 0)
    busy = loaded / (phases["load"] * LINK * gpus) if phases["load"] > 0 else 0
    # The link carries both directions at about LINK in total (two lanes on one GPU measured
    # 55.5 GB/s together, docs/benchmarks.md), so the epoch's share of it is:
    moved = (t["h2d_gather_bytes"] + t["h2d_block_bytes"] + t["d2h_bytes"] +
             t.get("d2h_index_bytes", 0))
    epoch_busy = moved / (seconds * LINK * gpus) if seconds > 0 else 0
    report = run.get("report", {})
    # Evaluations after the first epoch's (which fills the evaluation cache): EVAL_EVERY=1.
    evals = [m["eval_seconds"] for m in ms if m.get("valid_accuracy") is not None]
    return {"seconds": seconds, "phases": phases, "t": t, "busy": busy, "epoch_busy": epoch_busy,
            "eval": statistics.median(evals) if evals else None,
            "peak": max(m.get("peak_device_bytes", 0) for m in ms),
            "pc": f"{report.get('partitions', '?')}x{report.get('chunks', '?')}",
            "loss": report.get("final_loss")}


def trace_file_name(run_name):
    """The run's --trace file in the traces folder (gpu_train.sh: other characters than letters,
    digits, '.', '_' and '-' as '_')."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", run_name) + ".json"


def trace_lines(runs, stats, folder):
    """Host-link busy time per device from each run's timeline (last epoch)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import trace_summary  # same folder; standard library only

    lines = []
    for r in runs:
        path = os.path.join(folder, trace_file_name(r["name"]))
        s = stats.get(r["name"])
        if not s or not os.path.exists(path):
            continue
        try:
            summary = trace_summary.summarize(path, None)
        except (ValueError, KeyError, SystemExit) as e:
            lines.append(f"- {r['name']}: trace not read ({e})")
            continue
        t = s["t"]
        moved = (t["h2d_gather_bytes"] + t["h2d_block_bytes"] + t["d2h_bytes"] +
                 t.get("d2h_index_bytes", 0)) / max(1, r["gpus"])
        parts = []
        for d in summary["devices"]:
            busy = d["host_link_busy_ms"]
            rate = moved / (busy * 1e-3) / 1e9 if busy > 0 else 0.0
            parts.append(f"device {d['device']} {busy:.1f} ms of {summary['wall_ms']:.1f} ms "
                         f"({100 * d['host_link_busy_fraction']:.0f} %), {rate:.0f} GB/s while busy")
        lines.append(f"- {r['name']}: " + "; ".join(parts))
    if not lines:
        return []
    return (["Host link by the timeline (last epoch; the rate divides each GPU's share of the "
             "epoch's H2D + D2H bytes by its busy time):"] + lines + [""])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", required=True)
    ap.add_argument("--pyg", default="")
    ap.add_argument("--datasets", default="")
    ap.add_argument("--machine", default="")
    ap.add_argument("--traces", default="", help="folder of the runs' --trace files (NAME.json)")
    args = ap.parse_args()
    runs = read_lines(args.runs)
    pyg = {(p.get("dataset"), p.get("model")): p for p in read_lines(args.pyg)} if args.pyg else {}
    datasets = read_lines(args.datasets) if args.datasets else []

    out = []
    if args.machine:
        out.append(f"Machine: {args.machine}.")
        out.append("")
    if datasets:
        out.append("| dataset | vertices | edges | d | classes | working set | cap (1/4) |")
        out.append("|---|---|---|---|---|---|---|")
        for d in datasets:
            i = d["info"]
            out.append(f"| {d['dataset']}-like | {i['nodes']} | {i['edges']} | {i['feature_dim']} "
                       f"| {i['classes']} | {d['working_set'] / 2**30:.2f} GiB "
                       f"| {d['cap'] / 2**30:.2f} GiB |")
        out.append("")

    stats = {r["name"]: run_stats(r) for r in runs if "metrics" in r}
    one_gpu = {}
    for r in runs:
        s = stats.get(r["name"])
        if s and r["gpus"] == 1:
            one_gpu[(r["dataset"], r["model"], r["gpu_memory"] > 0, r.get("overlap", 1),
                     r.get("variant", ""))] = s["seconds"]

    out.append("| dataset | model | GPUs | P x C | comm | cap | s/epoch | evaluation (÷ epoch) "
               "| load | p2p | compute | "
               "store | flush | optimizer | H2D GB/epoch (gather + block) | P2P GB/epoch "
               "| D2H GB/epoch | host link busy in load | host link busy over the epoch "
               "| peak GPU GiB | 2 GPUs vs 1 | PyG (1 GPU) s/epoch ÷ ours |")
    out.append("|" + "---|" * 22)
    for r in runs:
        s = stats.get(r["name"])
        capped = r.get("gpu_memory", 0) > 0
        cap = f"{r['gpu_memory'] / 2**30:.2f} GiB" if capped else "-"
        if s is None:
            why = r.get("infeasible") or f"failed (rc {r.get('rc')})"
            errors = [line for line in why.splitlines() if "error:" in line]
            why = (errors[-1].split("error:", 1)[1].strip() if errors else why)
            why = "not run: " + why.replace("\n", "; ").replace("|", "/")
            out.append(f"| {r['dataset']} | {r.get('model', 'gcn+gat')} | {r['gpus']} | | "
                       f"{r.get('comm', '')} | {cap} | {why} |" + " |" * 15)
            continue
        p, t = s["phases"], s["t"]
        speed = ""
        base = one_gpu.get((r["dataset"], r["model"], capped, r.get("overlap", 1),
                            r.get("variant", "")))
        if r["gpus"] > 1 and base:
            speed = f"{base / s['seconds']:.2f}x"
        peer = ""
        pg = pyg.get((r["dataset"], r["model"])) if r["gpus"] == 1 and not capped else None
        if pg:
            if pg.get("status") == "ok":
                peer = f"{pg['seconds_per_epoch'] / s['seconds']:.2f}"
            else:
                peer = f"PyG {pg.get('status')}"
        comm = r["comm"] + ("" if r.get("overlap", 1) else " (no overlap)")
        if r.get("variant"):
            comm += f" ({r['variant']})"
        evaluation = (f"{fmt_s(s['eval'])} ({s['eval'] / s['seconds']:.2f})"
                      if s["eval"] is not None and s["seconds"] > 0 else "-")
        out.append(
            f"| {r['dataset']} | {r['model']} | {r['gpus']} | {s['pc']} | {comm} | {cap} "
            f"| {fmt_s(s['seconds'])} | {evaluation} | {fmt_s(p['load'])} | {fmt_s(p['p2p'])} "
            f"| {fmt_s(p['compute'])} | {fmt_s(p['store'])} | {fmt_s(p['flush'])} "
            f"| {fmt_s(p['optimizer'])} "
            f"| {gb(t['h2d_gather_bytes'])} + {gb(t['h2d_block_bytes'])} | {gb(t['p2p_bytes'])} "
            f"| {gb(t['d2h_bytes'] + t.get('d2h_index_bytes', 0))} "
            f"| {100 * s['busy']:.0f}% | {100 * s['epoch_busy']:.0f}% "
            f"| {s['peak'] / 2**30:.2f} "
            f"| {speed} | {peer} |")
    out.append("")

    # The three --comm modes at 2 GPUs, uncapped.
    lines = []
    for key in sorted({(r["dataset"], r["model"]) for r in runs if "model" in r}):
        modes = {}
        for r in runs:
            if ((r["dataset"], r.get("model")) == key and r["gpus"] == 2
                    and r["gpu_memory"] == 0 and r.get("overlap", 1) and not r.get("variant")
                    and not r.get("plan_tag")):
                s = stats.get(r["name"])
                if s:
                    modes[r["comm"]] = s
        if len(modes) == 3:
            order = ["baseline", "p2p", "p2p+reuse"]
            secs = [modes[m]["seconds"] for m in order]
            h2d = [modes[m]["t"]["h2d_gather_bytes"] for m in order]
            ok_time = secs[0] >= secs[1] >= secs[2]
            ok_bytes = h2d[0] >= h2d[1] >= h2d[2]
            lines.append(
                f"- {key[0]} {key[1]}, 2 GPUs: s/epoch baseline {fmt_s(secs[0])}, p2p "
                f"{fmt_s(secs[1])}, p2p+reuse {fmt_s(secs[2])} "
                f"({'ordered' if ok_time else 'NOT ordered'}); H2D gather GB/epoch "
                f"{gb(h2d[0])} / {gb(h2d[1])} / {gb(h2d[2])} "
                f"({'ordered' if ok_bytes else 'NOT ordered'})")
    if lines:
        out.append("Comm modes (expected baseline ≥ p2p ≥ p2p+reuse):")
        out.extend(lines)
        out.append("")
    # Device time per device of the multi-GPU runs: how evenly the partitions load the GPUs.
    lines = []
    for r in runs:
        ms = timed(r.get("metrics", []))
        if r.get("gpus", 1) < 2 or not ms or "device_phases" not in ms[0]:
            continue
        parts = []
        for d in range(len(ms[0]["device_phases"])):
            ph = {k: mean(m["device_phases"][d][k] for m in ms)
                  for k in ("load", "compute", "store", "flush")}
            parts.append(f"device {d}: load {fmt_s(ph['load'])}, compute {fmt_s(ph['compute'])}, "
                         f"store {fmt_s(ph['store'])}, flush {fmt_s(ph['flush'])}")
        comm = r["comm"] + ("" if r.get("overlap", 1) else " (no overlap)")
        if r.get("variant"):
            comm += f" ({r['variant']})"
        lines.append(f"- {r['dataset']} {r['model']} {comm}: " + "; ".join(parts))
    if lines:
        out.append("Device time per device (2 GPUs):")
        out.extend(lines)
        out.append("")
    if args.traces:
        out.extend(trace_lines(runs, stats, args.traces))
    if pyg:
        out.append("PyG peer (one GPU, full graph, same model sizes, median epoch after warm-up):")
        for (ds, model), p in sorted(pyg.items()):
            if p.get("status") == "ok":
                out.append(f"- {ds} {model}: {fmt_s(p['seconds_per_epoch'])}/epoch, peak "
                           f"{p['peak_gpu_bytes'] / 2**30:.1f} GiB (torch {p.get('torch')}, "
                           f"PyG {p.get('torch_geometric', '?')})")
            else:
                out.append(f"- {ds} {model}: {p.get('status')} ({p.get('error', '')[:160]})")
        out.append("")
    print("\n".join(out))


if __name__ == "__main__":
    main()
