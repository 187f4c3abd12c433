#include "ddp/launcher/config/plan.h"
