# A 2-rank init_process_group("gloo") job for the workers' store scenarios
# (test_workers_store_scenarios.cpp, test_c10d_workers_store.cpp): all_reduce
# and barrier through the launcher's store. KILL_RANK0_ONCE=1: rank 0
# SIGKILLs itself after the barrier of attempt 0, the store's old host in
# torchrun 1.x terms; =before_barrier: before it, so that no rank of attempt 0
# ends well. HOLD_FIRST_ROUND=1: every rank of attempt 0 of a world of several
# waits after the all_reduce (until the test kills a node).
import os
import signal
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(3) * (rank + 1)
dist.all_reduce(t)
restart = os.environ["TORCHELASTIC_RESTART_COUNT"]
kill = os.environ.get("KILL_RANK0_ONCE") if rank == 0 and restart == "0" else None
if os.environ.get("HOLD_FIRST_ROUND") and restart == "0" and dist.get_world_size() > 1:
    print(f"rank {rank} holding", flush=True)
    time.sleep(120)
if kill == "before_barrier":
    os.kill(os.getpid(), signal.SIGKILL)
dist.barrier()
if kill:
    os.kill(os.getpid(), signal.SIGKILL)
print(f"rank {rank} sum {t.tolist()} agent {os.environ['TORCHELASTIC_USE_AGENT_STORE']} restart {restart} "
      f"port {os.environ['MASTER_PORT']} torch {torch.__version__.split('.')[0]} addr {os.environ['MASTER_ADDR']}",
      flush=True)
dist.destroy_process_group()
