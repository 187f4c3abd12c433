"""ddp-launch --python_heartbeat: enables ddp_launch.heartbeat in a Python
worker without touching its script. Nothing is imported until the script
has imported torch (an import hook on the torch package: enabled once its
import is complete, so no partly imported module is patched), so a Python
that never imports torch pays nothing. Then any other sitecustomize on the path runs, as it would
have without this one."""
import importlib.abc
import importlib.util
import os
import sys

_WATCHED = "torch"


class _EnableAfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != _WATCHED:
            return None
        sys.meta_path.remove(self)  # find the real module, once
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        real_exec = spec.loader.exec_module

        def exec_module(module):
            real_exec(module)
            try:
                import ddp_launch.heartbeat
                ddp_launch.heartbeat.enable()
            except Exception as e:  # diagnostics must never stop the job
                print(f"ddp_launch.heartbeat: warning: not enabled: {e}", file=sys.stderr)

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("DDP_HEARTBEAT_FILE"):
    sys.meta_path.insert(0, _EnableAfterImport())


def _run_next_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if os.path.abspath(entry or ".") == here:
            continue
        candidate = os.path.join(entry or ".", "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_ddp_launch_next_sitecustomize", candidate)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return


_run_next_sitecustomize()
