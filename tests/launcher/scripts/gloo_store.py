# A 2-rank init_process_group("gloo") job for the workers' store scenarios
# (test_workers_store_scenarios.cpp): all_reduce and barrier through the
# launcher's store. KILL_RANK0_ONCE=1: rank 0 SIGKILLs itself after the
# barrier of attempt 0, the store's old host in torchrun 1.x terms.
import os
import signal

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(3) * (rank + 1)
dist.all_reduce(t)
dist.barrier()
restart = os.environ["TORCHELASTIC_RESTART_COUNT"]
if os.environ.get("KILL_RANK0_ONCE") and rank == 0 and restart == "0":
    os.kill(os.getpid(), signal.SIGKILL)
print(f"rank {rank} sum {t.tolist()} agent {os.environ['TORCHELASTIC_USE_AGENT_STORE']} restart {restart} "
      f"port {os.environ['MASTER_PORT']} torch {torch.__version__.split('.')[0]}", flush=True)
dist.destroy_process_group()
