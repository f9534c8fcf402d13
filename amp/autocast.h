// The user's autocast header. Autocast itself (AutocastGuard, the casts each op applies by its descriptor's
// policy, the weight-cast cache) is part of the ops layer, ops/autocast.h, because every op applies it
// before computing; amp/ sits above optim/ and holds the GradScaler. Both live in namespace amp.
#pragma once

#include "ops/autocast.h"  // IWYU pragma: export
