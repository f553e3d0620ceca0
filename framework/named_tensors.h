// An ordered list of (name, tensor): what state_dict()s return and what checkpoints store.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tensor.h"

namespace tg {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

}  // namespace tg
