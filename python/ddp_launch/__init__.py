"""ddp-launch's Python side: the heartbeat page writer for Python ranks
(ddp_launch.heartbeat). The launcher itself is a native program."""
