#include "ddp/launcher/supervise/supervisor.h"
