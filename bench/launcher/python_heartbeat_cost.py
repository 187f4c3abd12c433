"""The cost of python/ddp_launch/heartbeat.py per training step without the
machine's noise, in one process: (1) the page writes of a step (a step mark,
a collective started and finished, a wait added) in a hot loop; (2) the same
DDP model's step with DDP's built-in allreduce, with torch's own Python
allreduce hook (default_hooks.allreduce_hook: what any Python hook costs)
and with the module recording it (DDP's built-in allreduce, its sync seen
from autograd's final callbacks, the step marked), a group of one process
(Gloo, a FileStore), steps interleaved, medians. Prints "PAGE_NS <ns per
step's writes>" and "DDP_MS <built-in ms> <torch's Python hook ms> <with
the module ms>"; then (3) what the module adds to a step in absolute terms,
on a DDP model so small (Linear(8, 8)) that the step is mostly DDP's and
the module's own Python: "SYNC_US <without us> <with the module us>".
Run by bench_python_heartbeat.py.

    python3 python_heartbeat_cost.py ROOT MODEL STEPS BATCH
"""
import os
import statistics
import sys
import tempfile
import time

root, model_name, steps, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sys.path.insert(0, os.path.join(root, "python"))
sys.path.insert(0, os.path.join(root, "bench", "worker"))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from ddp_launch import heartbeat  # noqa: E402

with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "page")
    with open(path, "wb") as f:
        f.write(heartbeat.MAGIC + bytes(heartbeat.PAGE - len(heartbeat.MAGIC)))
    page = heartbeat.Page(path)
    n = 20000
    t0 = time.perf_counter_ns()
    for i in range(n):
        page.set_step(i + 1)
        seq = page.started("allreduce", 4096)
        page.finished(seq)
        page.add_wait(1000)
    print(f"PAGE_NS {(time.perf_counter_ns() - t0) / n:.0f}")

    dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "store"), rank=0, world_size=1)
    import python_step  # noqa: E402  (the DDP-overhead table's models)
    torch.manual_seed(0)
    make = {"mlp": lambda: python_step.Mlp(768), "cnn": lambda: python_step.FashionCnn()}[model_name]
    shape = (batch, 256) if model_name == "mlp" else (batch, 1, 28, 28)
    x, y = torch.randn(*shape), torch.randint(0, 10, (batch,))
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    heartbeat._patch_ddp()  # DDP.forward watched, for every model; only model 2 runs with the page
    models = [DDP(make()), DDP(make()), DDP(make())]
    models[1].register_comm_hook(dist.group.WORLD, default_hooks.allreduce_hook)
    opts = [torch.optim.SGD(m.parameters(), lr=0.01) for m in models]

    def interleaved(step_fns, warm, steps):
        """Median µs of each of step_fns, run in a rotating order, the last
        with the page (and the optimizer step hook's mark)."""
        last, times = len(step_fns) - 1, [[] for _ in step_fns]
        for i in range(warm + steps):
            for k in [(i + j) % len(step_fns) for j in range(len(step_fns))]:
                heartbeat._page = page if k == last else None
                t0 = time.perf_counter_ns()
                step_fns[k]()
                if k == last:
                    heartbeat._next_step()
                if i >= warm:
                    times[k].append((time.perf_counter_ns() - t0) / 1e3)
        heartbeat._page = None
        return [statistics.median(t) for t in times]

    def train_step(k):
        opts[k].zero_grad()
        torch.nn.functional.cross_entropy(models[k](x), y).backward()
        opts[k].step()

    medians = interleaved([lambda k=k: train_step(k) for k in range(3)], 3, steps)
    collectives = page._get(heartbeat._FINISHED)
    if collectives < steps + 3:
        sys.exit(f"python_heartbeat_cost.py: the module recorded {collectives} DDP syncs in {steps + 3} steps")
    print("DDP_MS " + " ".join(f"{us / 1e3:.3f}" for us in medians))

    tiny = [DDP(torch.nn.Linear(8, 8)), DDP(torch.nn.Linear(8, 8))]
    xt = torch.randn(4, 8)
    medians = interleaved([lambda m=m: m(xt).sum().backward() for m in tiny], 100, 2000)
    print("SYNC_US " + " ".join(f"{us:.1f}" for us in medians))
    dist.destroy_process_group()
