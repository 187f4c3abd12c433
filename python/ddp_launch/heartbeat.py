"""This rank's ddp-launch heartbeat page, written from Python.

ddp-launch gives every worker a heartbeat page (DDP_HEARTBEAT_FILE, an
inherited sealed memfd): the C++ runtime records there the collective it is
in, its training step, the time it waits for collectives and timed marks of
both, and the launcher reads it for stall detection (--stall_timeout), the
straggler scores and the trace (--trace_file). This module writes the same
page for a Python rank, with no dependency beyond torch:

  - collectives: torch.distributed's all_reduce, broadcast, all_gather,
    all_gather_into_tensor, reduce_scatter_tensor, reduce, barrier (and their
    async forms: the end from the Work's future), and DDP's gradient sync,
    one allreduce a synced backward from the end of its computation to
    DDP's last bucket summed (two autograd final callbacks, _DdpSync: DDP
    keeps its built-in allreduce, or the script's own communication hook);
  - steps: every optimizer step (torch's global optimizer step hooks, or
    each optimizer's step on torch 1.x), the Lightning or Hugging Face loop
    included, since both step an optimizer;
  - waits: a blocking collective's whole call; for DDP, the sync's;
  - the exit: once the script has ended, the page's exiting mark, so a
    rank that then dies of a signal (torch 2.x's Gloo threads at interpreter
    exit) is reported as dying in its exit.

Only the process that enabled the page writes it. A forked child (a
DataLoader worker) inherits the mapping and the exit callback; at the fork
it trades the shared page for a private scratch one, so its exit never marks
its parent rank as exiting, and its collectives, if any, are not the rank's.

Enable it with one line in the script::

    import ddp_launch.heartbeat; ddp_launch.heartbeat.enable()

or without touching the script: ``ddp-launch --python_heartbeat``, which
puts this package and a sitecustomize on the workers' PYTHONPATH; that
sitecustomize enables it once torch.distributed is imported (an import
hook: a Python that never imports torch pays nothing), then runs any other
sitecustomize on the path.

Outside ddp-launch (no DDP_HEARTBEAT_FILE) enable() does nothing. The page's
layout is common/include/ddp/common/heartbeat.h's (version 2). Writes are
8-byte stores into the shared mapping (struct.pack_into on an aligned
offset); no lock and no system call on the hot path.
"""

import collections
import fcntl
import mmap
import os
import struct
import sys
import threading
import time

MAGIC = b"DDPHB002"
PAGE = 4096
_PID, _STARTED, _FINISHED, _KIND, _BYTES, _STEP, _WAIT, _STEPS_MARKED, _EXITING = 8, 16, 24, 32, 40, 48, 56, 64, 72
# 80 recovery_capable, 88 recovery_generation (heartbeat.h): a Python rank
# never writes them, so it does not advertise in-place recovery and a lost
# peer means a full restart.
_RECOVERY_CAPABLE, _RECOVERY_GENERATION = 80, 88
_STEP_RING, _STEP_N, _STEP_SIZE = 128, 48, 32
_COLL_RING, _COLL_N, _COLL_SIZE = 1664, 76, 32
_KIND_SHIFT = 56
KINDS = {"allreduce": 1, "broadcast": 2, "allgather": 3, "barrier": 4, "reduce_scatter": 5, "other": 6}
_F_GET_SEALS = 1034  # fcntl.F_GET_SEALS on Linux
_F_SEAL_SHRINK = 0x0002

_q = struct.Struct("=Q")


class Page:
    """One mapped heartbeat page and its writer's counters."""

    def __init__(self, path):
        prefix = "/proc/self/fd/"
        inherited = path.startswith(prefix) and path[len(prefix):].isdigit()
        fd = int(path[len(prefix):]) if inherited else os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            if inherited and not fcntl.fcntl(fd, _F_GET_SEALS) & _F_SEAL_SHRINK:
                raise RuntimeError(f"the heartbeat page {path} is not a sealed heartbeat page made by ddp-launch")
            if os.fstat(fd).st_size != PAGE:
                raise RuntimeError(f"the heartbeat file {path} is not a {PAGE}-byte file made by ddp-launch")
            self._m = mmap.mmap(fd, PAGE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)  # the mapping keeps the page; the rank's children do not inherit it
        if self._m[:8] != MAGIC:
            raise RuntimeError(f"the heartbeat file {path} was not made by this ddp-launch "
                               f"(magic {bytes(self._m[:8])!r}, expected {MAGIC!r})")
        self._seq = 0
        self._lock = threading.Lock()  # collectives may be issued from several threads
        self._put(_PID, os.getpid())

    def disown(self):
        """In a forked child: writes go to a private scratch page from now
        on (no check on the hot path), the rank's page is unmapped here."""
        shared, self._m = self._m, mmap.mmap(-1, PAGE)
        shared.close()

    def _put(self, off, v):
        _q.pack_into(self._m, off, v)

    def _get(self, off):
        return _q.unpack_from(self._m, off)[0]

    def set_step(self, step):
        n = self._get(_STEPS_MARKED)
        e = _STEP_RING + (n % _STEP_N) * _STEP_SIZE
        self._put(e, 0)
        self._put(e + 8, step)
        self._put(e + 16, time.monotonic_ns())
        self._put(e + 24, self._get(_WAIT))
        self._put(e, n + 1)
        self._put(_STEPS_MARKED, n + 1)
        self._put(_STEP, step)

    def started(self, kind, nbytes):
        with self._lock:
            self._seq += 1
            seq = self._seq
        e = _COLL_RING + ((seq - 1) % _COLL_N) * _COLL_SIZE
        self._put(e, 0)
        self._put(e + 8, (KINDS.get(kind, 6) << _KIND_SHIFT) | (nbytes & ((1 << _KIND_SHIFT) - 1)))
        self._put(e + 16, time.monotonic_ns())
        self._put(e + 24, 0)
        self._put(e, seq)
        self._put(_KIND, KINDS.get(kind, 6))
        self._put(_BYTES, nbytes)
        self._put(_STARTED, seq)
        return seq

    def finished(self, seq, at_ns=None):
        e = _COLL_RING + ((seq - 1) % _COLL_N) * _COLL_SIZE
        with self._lock:
            if self._get(e) == seq and self._get(e + 24) == 0:
                self._put(e + 24, at_ns or time.monotonic_ns())
            if seq > self._get(_FINISHED):
                self._put(_FINISHED, seq)

    def add_wait(self, ns):
        with self._lock:
            self._put(_WAIT, self._get(_WAIT) + max(0, int(ns)))

    def mark_exiting(self):
        """The script has ended: from now on the process only exits, and a
        signal is a library's teardown (the launcher names it so)."""
        if self._get(_EXITING) == 0:
            self._put(_EXITING, time.monotonic_ns())


_page = None
_step = 0  # optimizer steps done
_page_marked = [False]  # a step was marked


def page():
    """The page enable() attached, or None."""
    return _page


def _nbytes(x):
    try:
        import torch
        if isinstance(x, torch.Tensor):
            return x.numel() * x.element_size()
        if isinstance(x, (list, tuple)):
            return sum(_nbytes(t) for t in x)
    except Exception:
        pass
    return 0


def _wrap_collective(dist, name, kind, tensor_arg):
    fn = getattr(dist, name, None)
    if fn is None or getattr(fn, "_ddp_launch", False):
        return

    def wrapped(*args, **kwargs):
        p = _page
        if p is None:
            return fn(*args, **kwargs)
        t = args[tensor_arg] if tensor_arg is not None and len(args) > tensor_arg else None
        seq = p.started(kind, _nbytes(t))
        t0 = time.monotonic_ns()
        work = fn(*args, **kwargs)
        if kwargs.get("async_op"):
            if work is not None:
                try:
                    work.get_future().add_done_callback(lambda _f: p.finished(seq))
                except Exception:
                    p.finished(seq)
        else:
            p.add_wait(time.monotonic_ns() - t0)
            p.finished(seq)
            _held.append((args, kwargs, time.monotonic()))
        return work

    wrapped._ddp_launch = True
    wrapped.__wrapped__ = fn
    wrapped.__name__ = fn.__name__
    wrapped.__doc__ = fn.__doc__
    setattr(dist, name, wrapped)


# The arguments of the last blocking collectives, kept alive here. Gloo's
# worker thread drops its reference to a collective's Work just after the
# caller's wait returns; when the caller had already dropped the tensor (a
# temporary: dist.all_reduce(torch.ones(1))), that thread is left the
# tensor's last owner and must take the GIL to free its Python object. If it
# asks while the interpreter is finalizing, CPython ends the thread with
# pthread_exit and the unwinding through a noexcept destructor aborts the
# rank ("terminate called without an active exception"; torch 2.11 here: 5
# of 82 runs of a DDP script ending so, with and without this module;
# pytorch/pytorch#190489). Held here, the tensors outlive Gloo's reference
# and are freed on the main thread. Bounded: older entries go as new ones
# come, long after their Work. It makes the abort rarer, not impossible (a
# CI run saw one more): a script that drops its DDP model before
# destroy_process_group() joins Gloo's threads before exit and ends it.
_held = collections.deque(maxlen=8)  # (args, kwargs, monotonic time finished)


def _settle_held(window_s=0.05):
    """At exit, before the interpreter finalizes: while Gloo may still hold
    a held tensor (torch >= 2 counts a tensor's owners: more than this
    module's), sleeps in 1 ms steps, so that Gloo's thread drops it now, or
    takes the GIL now if it needs it. At most window_s after the last
    collective finished: Gloo drops its reference microseconds after, so
    only a thread the scheduler kept off its core needs the wait, and a
    tensor that has other owners (a parameter) costs an exit no more than
    that. torch 1.x cannot count, and its held tensors stay held to the end."""
    if not _held:
        return
    deadline = _held[-1][2] + window_s
    tensors = [t for args, kwargs, _ in list(_held) for t in _tensors_in(args + tuple(kwargs.values()))
               if hasattr(t, "_use_count")]
    while time.monotonic() < deadline and any(t._use_count() > 1 for t in tensors):
        time.sleep(0.001)


def _tensors_in(values):
    import torch
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from _tensors_in(v)


_exit_registered = [False]


def _destroy_group_at_exit():
    """A Python communication hook still registered when the interpreter
    exits with the process group alive (Lightning's Trainer leaves it so)
    made torch 2.11 abort ("terminate called without an active exception")
    in 2 of 6 runs here; destroying the group first, as torch asks scripts
    to, ended it (0 of 10). The module registers no hook now, but a script
    may, and Gloo's threads at exit are the same: kept for every DDP job
    the module watches. Local to the process: no collective."""
    if _exit_registered[0]:
        return
    _exit_registered[0] = True
    import atexit

    def destroy():
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()

    atexit.register(destroy)


class _DdpSync:
    """DDP's gradient sync, seen from autograd, without a communication hook
    (a Python hook costs 0.2-0.5 ms a step over DDP's built-in C++
    allreduce, which stays). A synced forward's outputs get a gradient hook;
    the first to run (backward has begun) queues an autograd final
    callback, which runs once the backward's computation is done: the sync
    starts there (one collective: the gradients' bytes). It queues a second
    one, which runs after DDP's own final callback (queued later, when its
    last bucket was ready) has waited for every bucket's sum: the sync
    ends there, and the time between is the step's wait. On CUDA both
    callbacks run when the CPU has queued the kernels, not when the GPU
    has run them: the wait seen there is the CPU's (NCCL's sums are
    awaited on the stream). Two synced forwards before one backward are
    two syncs."""

    _MAX_HOOKED = 8  # output tensors hooked per forward

    def __init__(self):
        from torch.autograd import Variable
        self._queue = Variable._execution_engine.queue_callback

    def watch(self, ddp, output):
        """Called after a forward of `ddp` (a DistributedDataParallel) that
        returned `output`, when this rank has a page."""
        import torch
        if not (torch.is_grad_enabled() and getattr(ddp, "require_backward_grad_sync", True)):
            return  # no_sync() or evaluation: DDP sums nothing after this forward
        nbytes = getattr(ddp, "_ddp_launch_grad_bytes", None)
        if nbytes is None:
            nbytes = sum(p.numel() * p.element_size() for p in ddp.parameters() if p.requires_grad)
            ddp._ddp_launch_grad_bytes = nbytes
        fired = [False]

        def backward_began(_grad):
            if not fired[0]:
                fired[0] = True
                try:
                    self._queue(lambda: self._computed(nbytes))
                except RuntimeError:  # not inside autograd's backward after all: nothing to see
                    pass

        for t in _grad_tensors(output, self._MAX_HOOKED):
            t.register_hook(backward_began)

    def _computed(self, nbytes):
        p = _page
        if p is None:
            return
        began = time.monotonic_ns()
        seq = p.started("allreduce", nbytes)
        self._queue(lambda: self._summed(p, seq, began))

    @staticmethod
    def _summed(p, seq, began):
        end = time.monotonic_ns()
        p.finished(seq, end)
        p.add_wait(end - began)


def _grad_tensors(value, limit):
    """Up to `limit` tensors that require grad in a forward's output
    (a tensor, or tuples, lists and dicts of them: a Hugging Face output)."""
    import torch
    found, todo = [], [value]
    while todo and len(found) < limit:
        v = todo.pop(0)
        if isinstance(v, torch.Tensor):
            if v.requires_grad:
                found.append(v)
        elif isinstance(v, (list, tuple)):
            todo.extend(v)
        elif isinstance(v, dict):
            todo.extend(v.values())
    return found


_sync = None  # the _DdpSync, made with the DDP patch


def _patch_ddp():
    global _sync
    from torch.nn.parallel import DistributedDataParallel as DDP
    if getattr(DDP, "_ddp_launch", False):
        return
    _sync = _DdpSync()
    forward = DDP.forward

    def watched_forward(self, *args, **kwargs):
        if _page is not None and _step == 0 and not _page_marked[0]:
            _page_marked[0] = True  # the first step starts at the first forward, not at import
            _page.set_step(1)
        if _page is not None and not getattr(self, "_ddp_launch_seen", False):
            self._ddp_launch_seen = True
            _destroy_group_at_exit()
        output = forward(self, *args, **kwargs)
        if _page is not None:
            _sync.watch(self, output)
        return output

    DDP.forward = watched_forward
    DDP._ddp_launch = True


def _next_step(*_args, **_kwargs):
    global _step
    _step += 1
    if _page is not None:
        _page_marked[0] = True
        _page.set_step(_step + 1)


def _patch_optimizers():
    import torch
    import torch.optim.optimizer as optimizer_module
    hook = getattr(optimizer_module, "register_optimizer_step_post_hook", None)
    if hook is not None:  # torch >= 2.0: every optimizer, Lightning's and HF's included
        hook(_next_step)
        return
    init = torch.optim.Optimizer.__init__  # torch 1.x: each optimizer's step, wrapped once made

    def patched_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        step = self.step

        def stepped(*a, **k):
            r = step(*a, **k)
            _next_step()
            return r

        self.step = stepped

    torch.optim.Optimizer.__init__ = patched_init


def _patch_torch():
    import torch.distributed as dist
    for name, kind, arg in (("all_reduce", "allreduce", 0), ("broadcast", "broadcast", 0),
                            ("all_gather", "allgather", 1), ("all_gather_into_tensor", "allgather", 1),
                            ("reduce_scatter_tensor", "reduce_scatter", 1), ("reduce", "other", 0),
                            ("barrier", "barrier", None)):
        _wrap_collective(dist, name, kind, arg)
    _patch_ddp()
    _patch_optimizers()


def _forget_in_child():
    """A fork of the rank is not the rank: it records nothing, and its exit
    (multiprocessing runs threading's exit callbacks, the module's exiting
    mark among them) must not mark the rank's page."""
    global _page
    p, _page = _page, None
    if p is not None:
        p.disown()


def enable():
    """Attaches this rank's page (DDP_HEARTBEAT_FILE) and starts recording.
    Returns the page, or None outside ddp-launch or when it cannot be
    attached (one warning line on stderr then; the run goes on without)."""
    global _page
    if _page is not None:
        return _page
    path = os.environ.get("DDP_HEARTBEAT_FILE")
    if not path:
        return None
    try:
        p = Page(path)
    except (OSError, RuntimeError) as e:
        print(f"ddp_launch.heartbeat: warning: {e}; this rank runs without a heartbeat", file=sys.stderr)
        return None
    _page = p
    os.register_at_fork(after_in_child=_forget_in_child)
    # The page's fd was this process's alone: a child (a spawned DataLoader
    # worker) must not take whatever has that number now for it.
    os.environ.pop("DDP_HEARTBEAT_FILE", None)
    _patch_torch()
    import atexit
    atexit.register(_settle_held)
    # The exit mark as early as the interpreter's exit allows: threading's
    # own exit callbacks run when the script has ended, before any atexit
    # function (Python 3.9+; atexit before that).
    register_early = getattr(threading, "_register_atexit", None)
    (register_early or atexit.register)(p.mark_exiting)
    return p
