#include "ddp/rdzv/agent_lines.h"
