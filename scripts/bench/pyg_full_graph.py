#!/usr/bin/env python3
"""The peer of scripts/bench/gpu_train.sh: PyTorch Geometric full-graph training on one GPU.

Reads a Sluice dataset.h5 with h5py (graph/indptr, graph/indices = in-edge CSR, features,
labels, split/train), builds the same model as sluice-train (GCN or GraphSAGE of --layers layers,
hidden H; GAT of 2 layers, K heads x F, 1 output head; dropout 0.5 on every layer's input;
Adam), trains full-graph steps and
prints one JSON line per model: seconds per epoch (median of the epochs after the warm-up ones, CUDA
synchronized), peak GPU memory, or "status": "OOM" when the GPU runs out of memory.

GCN uses a normalized sparse adjacency D^-1/2 (A + I) D^-1/2 (torch.sparse CSR, rows =
destinations) with GCNConv(normalize=False): PyG's sparse path (SpMM), the memory-efficient
way to run full-graph GCN. GraphSAGE (mean aggregation, root weight: sluice-train's SAGE) uses
SAGEConv on the same CSR without self loops, rows scaled to their mean. GAT uses GATConv on
edge_index (per-edge messages, as PyG does).

usage: pyg_full_graph.py --dataset data.h5 --model gcn|sage|gat|gcn,gat [--layers 2]
                         [--hidden 256] [--heads 4] [--gat-hidden 64] [--epochs 3] [--warmup 1]
                         [--name NAME]
"""
import argparse
import json
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--model", required=True, help="gcn, gat or a comma list (one process)")
    ap.add_argument("--layers", type=int, default=2, help="GCN and SAGE layers (GAT: 2)")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--gat-hidden", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=3, help="timed epochs + warm-up epochs")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--dropout", type=float, default=0.5)
    ap.add_argument("--name", default="")
    args = ap.parse_args()

    base = {"peer": "pyg", "dataset": args.name or args.dataset, "epochs": args.epochs,
            "warmup": args.warmup, "layers": args.layers}
    try:
        import h5py
        import torch
        import torch_geometric
        base["torch"] = torch.__version__
        base["torch_geometric"] = torch_geometric.__version__
    except Exception as e:  # noqa: BLE001 - report, do not crash the benchmark
        for model in args.model.split(","):
            print(json.dumps(dict(base, model=model, status="error", error=f"import: {e}")))
        return 0
    t0 = time.perf_counter()
    with h5py.File(args.dataset, "r") as f:
        data = {"indptr": torch.from_numpy(f["graph/indptr"][:].astype("int64")),
                "indices": torch.from_numpy(f["graph/indices"][:].astype("int64")),
                "x": torch.from_numpy(f["features"][:]),
                "y": torch.from_numpy(f["labels"][:].astype("int64")),
                "train": torch.from_numpy(f["split/train"][:].astype("int64"))}
    base["read_seconds"] = round(time.perf_counter() - t0, 2)
    for model in args.model.split(","):
        # Named as gpu_train.sh names the runs: "gcn3" for a 3-layer GCN.
        label = model if args.layers == 2 or model == "gat" else f"{model}{args.layers}"
        result = dict(base, model=label)
        train_one(args, model, data, result)
        print(json.dumps(result))
        sys.stdout.flush()
        torch.cuda.empty_cache()
    return 0


def train_one(args, model_name, data, result):
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GATConv, GCNConv, SAGEConv

    torch.backends.cuda.matmul.allow_tf32 = False  # Sluice runs TF32 off by default
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda:0")

    def stacked(conv, options):
        """A model of args.layers `conv` layers (hidden args.hidden), dropout on every layer's
        input and ReLU between layers: sluice-train's GCN and SAGE."""

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                widths = [x.shape[1]] + [args.hidden] * (args.layers - 1) + [classes]
                self.convs = torch.nn.ModuleList(
                    conv(widths[i], widths[i + 1], **options) for i in range(args.layers))

            def forward(self, h, a):
                for i, layer in enumerate(self.convs):
                    h = layer(F.dropout(h, args.dropout, self.training), a)
                    if i + 1 < len(self.convs):
                        h = F.relu(h)
                return h

        return Net

    indptr, indices = data["indptr"], data["indices"]
    n = indptr.numel() - 1
    result.update(nodes=n, edges=int(indices.numel()), feature_dim=int(data["x"].shape[1]))
    classes = int(data["y"].max().item()) + 1
    graph = model = opt = out = loss = None
    try:
        x, y, train_idx = data["x"].to(dev), data["y"].to(dev), data["train"].to(dev)
        train_idx = train_idx[y[train_idx] >= 0]
        if model_name == "gcn":
            # D^-1/2 (A + I) D^-1/2 with rows = destinations (in-edge CSR), self loops added.
            counts = (indptr[1:] - indptr[:-1]).to(dev)
            deg = counts.to(torch.float32) + 1.0
            ids = torch.arange(n, device=dev)
            rows = torch.cat([torch.repeat_interleave(ids, counts), ids])
            cols = torch.cat([indices.to(dev), ids])
            dinv = deg.pow(-0.5)
            vals = dinv[rows] * dinv[cols]
            adj = torch.sparse_coo_tensor(torch.stack([rows, cols]), vals, (n, n))
            graph = adj.coalesce().to_sparse_csr()
            del rows, cols, vals, deg, dinv, counts, ids, adj

            Net = stacked(GCNConv, dict(normalize=False))
        elif model_name == "sage":
            # Mean over in-neighbors (no self loop), rows = destinations; SAGEConv adds the root.
            counts = (indptr[1:] - indptr[:-1]).to(dev)
            ids = torch.arange(n, device=dev)
            rows = torch.repeat_interleave(ids, counts)
            vals = 1.0 / counts.clamp(min=1).to(torch.float32)[rows]
            graph = torch.sparse_csr_tensor(indptr.to(dev), indices.to(dev), vals, (n, n))
            del rows, vals, counts, ids

            Net = stacked(SAGEConv, dict(aggr="sum"))
        else:
            dst = torch.repeat_interleave(torch.arange(n), indptr[1:] - indptr[:-1])
            graph = torch.stack([indices, dst]).to(dev)  # edge_index: source -> destination
            del dst

            class Net(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.c1 = GATConv(x.shape[1], args.gat_hidden, heads=args.heads,
                                      dropout=args.dropout)
                    self.c2 = GATConv(args.gat_hidden * args.heads, classes, heads=1,
                                      dropout=args.dropout)

                def forward(self, h, a):
                    h = F.dropout(h, args.dropout, self.training)
                    h = F.elu(self.c1(h, a))
                    h = F.dropout(h, args.dropout, self.training)
                    return self.c2(h, a)

        model = Net().to(dev)
        opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(args.epochs):
            torch.cuda.synchronize()
            t = time.perf_counter()
            model.train()
            opt.zero_grad(set_to_none=True)
            out = model(x, graph)
            loss = F.cross_entropy(out[train_idx], y[train_idx])
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
            result.setdefault("losses", []).append(round(float(loss.item()), 6))
        timed = times[args.warmup:] or times
        result.update(status="ok", seconds_per_epoch=statistics.median(timed),
                      epoch_seconds=[round(t, 4) for t in times],
                      peak_gpu_bytes=int(torch.cuda.max_memory_allocated()))
    except torch.cuda.OutOfMemoryError as e:
        result.update(status="OOM", error=str(e).splitlines()[0][:300],
                      peak_gpu_bytes=int(torch.cuda.max_memory_allocated()))
    except RuntimeError as e:  # cuSPARSE / CUDA allocation failures surface as RuntimeError
        message = str(e).splitlines()[0][:300]
        result.update(status="OOM" if "out of memory" in message.lower() else "error",
                      error=message)
    finally:
        del graph, model, opt, out, loss


if __name__ == "__main__":
    sys.exit(main())
