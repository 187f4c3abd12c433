#!/bin/sh
# Worker for the real Slurm test: one line with what the launcher gave it
# (argv too, so --local_rank=N shows).
echo "worker rank=$RANK local_rank=$LOCAL_RANK world_size=$WORLD_SIZE local_world_size=$LOCAL_WORLD_SIZE" \
     "group_rank=$GROUP_RANK master=$MASTER_ADDR:$MASTER_PORT args=$*"
