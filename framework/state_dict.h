// A state dict: an ordered list of (name, tensor), PyTorch's names ("0.weight",
// "bn.running_mean", ...). What Module::state_dict() and the optimizers' state_dict() return and
// what checkpoints (npy folders, safetensors) store.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tensor.h"

namespace tg {

using StateDict = std::vector<std::pair<std::string, Tensor>>;

// The former name of StateDict (and framework/named_tensors.h its former header), kept so that
// programs written against them still build.
using NamedTensors [[deprecated("use tg::StateDict")]] = StateDict;

}  // namespace tg
