// tapegrad: a tape-based autograd training framework for the CPU.
// The one header a user includes: #include <tapegrad/tapegrad.h>
#pragma once

#include "framework/check.h"
#include "framework/dtype.h"
#include "framework/dump.h"
#include "framework/grad_mode.h"
#include "framework/atomic_file.h"
#include "framework/npy.h"
#include "framework/idx.h"
#include "framework/gradcheck.h"
#include "framework/parallel.h"
#include "framework/random.h"
#include "framework/registry.h"
#include "framework/storage.h"
#include "framework/tape.h"
#include "framework/tensor.h"
#include "framework/views.h"
#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/registry.h"
