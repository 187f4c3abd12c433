# A worker using torchrun's file timer (torch.distributed.elastic.timer), as
# under TORCHELASTIC_ENABLE_FILE_TIMER=1: argv[1] is
#   expire   rank EXPIRE_RANK (default 0) holds a 1 s scope 'load_batch'
#            around a 10 s sleep and must be killed; other ranks sleep 10 s
#            (the teardown stops them)
#   release  a 5 s scope released after 0.1 s: nothing happens, exit 0
# Prints "acquired <time.time()> pid <pid>" before its scope, and "survived"
# if a sleep that should have been cut short ended.
import os
import sys
import time

from torch.distributed.elastic.timer import FileTimerClient, configure, expires

configure(FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
case = sys.argv[1]
if case == "expire":
    if os.environ.get("RANK") == os.environ.get("EXPIRE_RANK", "0"):
        print(f"acquired {time.time():.3f} pid {os.getpid()}", flush=True)
        with expires(after=1, scope="load_batch"):
            time.sleep(10)
    else:
        time.sleep(10)
    print("survived", flush=True)
    sys.exit(3)
print(f"acquired {time.time():.3f} pid {os.getpid()}", flush=True)
with expires(after=5, scope="quick"):
    time.sleep(0.1)
print("released", flush=True)
