#!/usr/bin/env python3
"""Reads a worker's error file the way torchrun does: torchrun's elastic agent
builds a ProcessFailure for each failed worker, which parses the file named by
TORCHELASTIC_ERROR_FILE, and prints ChildFailedError's report of it. Prints
what it found, for the C++ test to compare:
    MESSAGE <first line of the message>
    TIMESTAMP <int>
    REPORT
    <torchrun's failure report, as it prints it>
Usage: read_error_file.py PATH"""
import sys

import torch
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

failure = ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file=sys.argv[1])
if not failure.error_file_data:
    sys.exit(f"torch {torch.__version__} found no error data in {sys.argv[1]}")
# A dict message is torchelastic's structured form; a string the plain one.
message = failure.message["message"] if isinstance(failure.message, dict) else failure.message
print("MESSAGE", str(message).splitlines()[0])
print("TIMESTAMP", failure.timestamp)
print("REPORT")
print(ChildFailedError("ddp-worker-test-helper", {0: failure}).format_msg())
