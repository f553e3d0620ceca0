// The registry of every differentiable op of the framework: tg::registry().table() prints it.
#pragma once

#include "../framework/registry.h"

namespace tg {

// The global registry, holding the built-in ops (filled on first use). Users may add their own.
Registry& registry();

}  // namespace tg
