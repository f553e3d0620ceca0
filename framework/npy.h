// NumPy .npy files: the format of the golden fixtures and a simple way to move tensors
// between PyTorch and tapegrad. Version 1.0/2.0/3.0 headers; little-endian float32 ('<f4'),
// float64 ('<f8'), float16 ('<f2'), int64 ('<i8') and int32 ('<i4'), each loaded as that
// dtype; C order only. numpy has no bfloat16: save_npy refuses it and says to use safetensors
// (or float32, which holds every bfloat16 value exactly).
#pragma once

#include <string>

#include "tensor.h"

namespace tg {

// Reads a .npy file. The file is untrusted: a truncated file, a malformed header, Fortran
// order or an unsupported dtype throws tg::Error naming the file and the problem, before any
// allocation larger than the file itself.
// Headers over numpy's default max_header_size (10000 bytes) are refused.
Tensor load_npy(const std::string& path);
// The same from the bytes of a .npy file in memory; `what` names the source in messages.
Tensor parse_npy(const std::string& bytes, const std::string& what = "<memory>");

// Writes a tensor (any strides) as a C-order .npy file, atomically: a temporary file beside
// the target is written, flushed and renamed, so a crash never leaves a half-written file.
void save_npy(const std::string& path, const Tensor& t);

}  // namespace tg
