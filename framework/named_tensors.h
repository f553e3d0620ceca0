// The former home of tg::NamedTensors, now tg::StateDict (state_dict.h); kept so that programs
// that include it still build.
#pragma once

#include "state_dict.h"
