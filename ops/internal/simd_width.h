// The width of one SIMD register in the copy of the kernels being compiled (see
// ops/internal/isa_dispatch.h): kernels that write GCC/Clang vector extensions size them with
// it, so that each copy uses its own registers at full width: 64 bytes in the AVX-512 copy
// (x86-64-v4), 32 in the AVX2 one (x86-64-v3), 16 in the generic one (x86-64-v2; NEON
// elsewhere). A vector type wider than the target's registers is split by the compiler, badly
// (its lanes go through the stack), and a narrower one leaves half the register unused.
#pragma once

#include "isa_dispatch.h"

namespace tg::kernels::TG_ISA_NS {

#if defined(__AVX512F__)
inline constexpr int kSimdBytes = 64;
#elif defined(__AVX__)
inline constexpr int kSimdBytes = 32;
#else
inline constexpr int kSimdBytes = 16;
#endif

}  // namespace tg::kernels::TG_ISA_NS
