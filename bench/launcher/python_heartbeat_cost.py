"""The cost of python/ddp_launch/heartbeat.py per training step without the
machine's noise, in one process: (1) the page writes of a step (a step mark,
a collective started and finished, a wait added) in a hot loop; (2) the same
DDP model's step with DDP's built-in allreduce, with torch's own Python
allreduce hook (default_hooks.allreduce_hook: what any Python hook costs)
and with the module's hook, a group of one process (Gloo, a FileStore),
steps interleaved, medians. Prints "PAGE_NS <ns per step's writes>" and
"DDP_MS <built-in ms> <torch's Python hook ms> <the module's hook ms>". Run by bench_python_heartbeat.py.

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
    models = [DDP(make()), DDP(make()), DDP(make())]
    models[1].register_comm_hook(dist.group.WORLD, default_hooks.allreduce_hook)
    models[2].register_comm_hook(dist.group.WORLD, heartbeat._buckets.hook)
    heartbeat._page = page
    opts = [torch.optim.SGD(m.parameters(), lr=0.01) for m in models]
    times = ([], [], [])
    for i in range(steps + 3):
        for k in [(i + j) % 3 for j in range(3)]:  # the order rotates
            t0 = time.perf_counter()
            opts[k].zero_grad()
            torch.nn.functional.cross_entropy(models[k](x), y).backward()
            opts[k].step()
            if i >= 3:
                times[k].append((time.perf_counter() - t0) * 1e3)
    print("DDP_MS " + " ".join(f"{statistics.median(t):.3f}" for t in times))
    dist.destroy_process_group()
