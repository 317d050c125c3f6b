#!/usr/bin/env python3
"""Plots epoch time and host-link bytes against --gpu-memory from the JSON lines of
scripts/bench/budget_sweep.sh (one or more files; one panel per graph), and prints the runs as a
Markdown table (a run without link_bytes, null, has none in either). Needs matplotlib (installed
on the GPU machine).

usage: plot_budget.py OUTPUT.png SWEEP.jsonl [SWEEP.jsonl ...]
"""
import json
import sys


def budget_bytes(text, peak):
    """--gpu-memory as bytes; 0 (no cap) plots at the run's peak with the device's headroom."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    text = str(text).strip()
    value = int(float(text[:-1]) * units[text[-1].upper()]) if text[-1:].upper() in units else int(text)
    return value if value > 0 else peak + peak // 7


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    rows = []
    for path in sys.argv[2:]:
        rows += [json.loads(line) for line in open(path) if line.strip()]
    rows = [r for r in rows if r.get("rc") == 0 and "epoch_s" in r]
    graphs = sorted({r["graph"] for r in rows})
    print("| graph | --gpu-memory | C | chosen | epoch s | forecast s | host link GB / epoch | "
          "resident GB / epoch | peak GPU GiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["graph"], budget_bytes(r["gpu_memory"], r["peak_gpu_bytes"]))):
        cap = "none" if str(r["gpu_memory"]) == "0" else \
            f"{budget_bytes(r['gpu_memory'], 0) / 2**30:.2f} GiB"
        chosen = "" if cap == "none" else "smallest" if r.get("tag") == "-smallest" else "forecast"
        forecast = f"{r['forecast_s']:.3f}" if "forecast_s" in r else ""
        link = "" if r.get("link_bytes") is None else f"{r['link_bytes'] / 1e9:.2f}"
        print(f"| {r['graph']} | {cap} | {r.get('chunks', '-')} | {chosen} | {r['epoch_s']:.3f} | "
              f"{forecast} | {link} | {r['resident_bytes'] / 1e9:.2f} | "
              f"{r['peak_gpu_bytes'] / 2**30:.2f} |")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(graphs), figsize=(6.4 * len(graphs), 4.4), squeeze=False)
    styles = {"": ("tab:blue", "tab:red", "-"), "-smallest": ("tab:cyan", "tab:orange", ":")}
    for ax, graph in zip(axes[0], graphs):
        twin = ax.twinx()
        uncapped = [r for r in rows if r["graph"] == graph and str(r["gpu_memory"]) == "0"]
        for tag in sorted({r.get("tag", "") for r in rows if r["graph"] == graph}):
            # Each series: its capped runs (TAG of budget_sweep.sh) and the uncapped run.
            runs = sorted((budget_bytes(r["gpu_memory"], r["peak_gpu_bytes"]) / 2**30, r)
                          for r in rows if r["graph"] == graph and
                          (r.get("tag", "") == tag or r in uncapped))
            if tag and all(r in uncapped for _, r in runs):
                continue
            time_color, link_color, line = styles.get(tag, ("tab:gray", "tab:gray", "-."))
            label = "C by forecast" if not tag else "smallest C" if tag == "-smallest" else tag
            x = [b for b, _ in runs]
            ax.plot(x, [r["epoch_s"] for _, r in runs], "o" + line, color=time_color,
                    label=f"epoch s, {label}")
            known = [(b, r) for b, r in runs if r.get("link_bytes") is not None]
            twin.plot([b for b, _ in known], [r["link_bytes"] / 1e9 for _, r in known], "s" + line,
                      color=link_color, alpha=0.6, label=f"host link GB, {label}")
            for b, r in runs:
                ax.annotate(f"C={r.get('chunks', '?')}", (b, r["epoch_s"]),
                            textcoords="offset points", xytext=(4, 6), fontsize=7,
                            color=time_color)
        ax.set_xlabel("--gpu-memory (GiB; the rightmost point: no cap)")
        ax.set_ylabel("training epoch (s)", color="tab:blue")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        twin.set_ylabel("host-link GB per epoch", color="tab:red")
        twin.set_ylim(bottom=0)
        lines = ax.get_legend_handles_labels()
        more = twin.get_legend_handles_labels()
        ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=7, loc="upper right")
        machine = next(iter(r.get("machine", "") for r in rows if r["graph"] == graph), "")
        ax.set_title(f"{graph}: GCN on one GPU ({machine})", fontsize=9)
    fig.tight_layout()
    fig.savefig(sys.argv[1], dpi=110)


if __name__ == "__main__":
    main()
