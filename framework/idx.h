// IDX files, the format of MNIST and Fashion-MNIST (data/fashion_mnist.h loads that dataset):
// a big-endian header (two zero bytes, a type code, the number of dims, then each dim as
// uint32) followed by the raw elements in C order. Files may be gzip-compressed (as
// distributed) or raw; the reader tells them apart by the gzip magic, not by the file name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor.h"

namespace tg {

// The contents of an unsigned-byte (type code 0x08) IDX file, the only type MNIST-format
// datasets use. Other type codes are rejected with a tg::Error naming the code.
struct IdxBytes {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // product(dims) bytes, C order
};

// Reads an IDX file (gzip or raw). The file is untrusted: a bad magic, a truncated header or
// payload, a gzip stream cut short (even inside its CRC trailer), a gzip CRC error, bytes past a
// raw file's payload or dims whose product cannot fit in the file (for gzip, in the most the
// file could inflate to) throw tg::Error naming the file. (Bytes after a complete gzip stream
// are ignored, as zlib and gzip -d ignore them.) The payload is
// read in 1 MB chunks: memory follows what the stream really delivers (plus a chunk), never
// the size the header claims.
IdxBytes read_idx(const std::string& path);

// Images: an IDX file of shape (N, H, W) as float32 in [0, 1] (byte / 255), shape [N, H, W].
Tensor load_idx_images(const std::string& path);

// Labels: an IDX file of shape (N) as int64, shape [N].
Tensor load_idx_labels(const std::string& path);

}  // namespace tg
