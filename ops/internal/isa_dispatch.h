// One mechanism by which every hot kernel runs on the best instruction set of the CPU it runs
// on (see framework/isa.h for the user's side).
//
// A kernel source file is compiled more than once: as part of the library with the portable
// baseline flags, and again for each extra instruction set with that set's flags (CMake:
// tapegrad_isa_sources, for every file whose name contains "_kernels"). Each compile puts the
// file's code in its own namespace, TG_ISA_NS, so the copies never meet at link time:
//
//   namespace tg::kernels::TG_ISA_NS {                    // in foo_kernels.cpp
//   template <class T> void foo_forward(const T* x, T* y, int64_t n) { ... }
//   template void foo_forward<float>(const float*, float*, int64_t);
//   }
//
// The public kernel (declared in foo_kernels.h, defined once in foo.cpp or a *_dispatch.cpp)
// forwards to the copy of the active instruction set:
//
//   TG_ISA_DECLARE(template <class T> void foo_forward(const T*, T*, int64_t);)  // all copies
//   template <class T> void foo_forward(const T* x, T* y, int64_t n) {
//     TG_ISA_DISPATCH(foo_forward<T>)(x, y, n);
//   }
//
// Everything such a file defines must sit in TG_ISA_NS or an unnamed namespace. Inline code it
// takes from other headers (the standard library, Eigen, framework/) is made private to each
// copy by the build (cmake/isa_object.sh renames those symbols), and a test checks that no
// code outside an ISA namespace uses instructions beyond the baseline
// (tests/check_isa_symbols.sh).
//
// Isa::Avx512Bf16 takes the AVX-512 copy here. A kernel that uses AVX512-BF16 instructions
// lives in its own file, ops/**/*_avx512bf16.cpp, compiled once for that level in namespace
// isa_avx512bf16 (TG_ISA_NS), and its public entry point calls it when active_isa() says so
// (see ops/matmul_dispatch.cpp).
#pragma once

#include "../../framework/isa.h"

// The namespace of this compile's copy: the build sets it for the extra instruction sets; the
// library's own compile of a kernel file (and any other file) gets the generic one.
#ifndef TG_ISA_NS
#define TG_ISA_NS isa_generic
#endif

// Declares the same functions in every copy's namespace (inside the enclosing namespace).
#if defined(TAPEGRAD_ISA_X86)
#define TG_ISA_DECLARE(...)           \
  namespace isa_generic {             \
  __VA_ARGS__                         \
  }                                   \
  namespace isa_avx2 {                \
  __VA_ARGS__                         \
  }                                   \
  namespace isa_avx512 {              \
  __VA_ARGS__                         \
  }
#define TG_ISA_DISPATCH(fn) ::tg::isa_select(&isa_generic::fn, &isa_avx2::fn, &isa_avx512::fn)
#else
#define TG_ISA_DECLARE(...) \
  namespace isa_generic {   \
  __VA_ARGS__               \
  }
#define TG_ISA_DISPATCH(fn) (&isa_generic::fn)
#endif

namespace tg {

// The copy of the active instruction set (a relaxed load and a switch).
template <class F>
F* isa_select(F* generic, F* avx2, F* avx512) {
  switch (active_isa()) {
    case Isa::Avx512Bf16:  // only kernels with their own AVX512-BF16 code differ there
    case Isa::Avx512: return avx512;
    case Isa::Avx2: return avx2;
    case Isa::Generic: break;
  }
  return generic;
}

}  // namespace tg
