#include "idx.h"

#include "checked_math.h"

#include <zlib.h>

#include <climits>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

namespace tg {

namespace {

// Deflate cannot compress better than about 1032:1; a gzip file of S bytes therefore never
// inflates past this bound, which caps what an untrusted header can make us allocate.
constexpr int64_t kMaxDeflateRatio = 1032;

// The payload is read in pieces of this size (see read_idx).
constexpr int64_t kReadChunkBytes = int64_t(1) << 20;

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Reads exactly n bytes (gzread transparently reads raw files as well). Returns the count read,
// fewer at the end of the data; throws on a zlib error (a corrupt stream, a CRC mismatch) and
// on a gzip stream that stops before its end (gzread then returns what it has and 0 after,
// like a clean end: only gzerror's Z_BUF_ERROR tells them apart, and without this check a
// file cut inside its CRC trailer loaded whatever it held, corrupt or not).
int64_t read_some(gzFile f, uint8_t* dst, int64_t n, const std::string& path) {
  int64_t done = 0;
  while (done < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(n - done, 1 << 30));
    const int got = gzread(f, dst + done, chunk);
    int errnum = Z_OK;
    const char* msg = gzerror(f, &errnum);
    TG_CHECK(got >= 0 && errnum != Z_BUF_ERROR, "read_idx: ", path, ": ",
             got >= 0 ? "truncated gzip stream (" : "corrupt gzip data (", msg && *msg ? msg : "unknown zlib error",
             ")");
    if (got == 0) break;
    done += got;
  }
  return done;
}

bool is_gzip(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  unsigned char magic[2] = {0, 0};
  f.read(reinterpret_cast<char*>(magic), 2);
  return f.gcount() == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

}  // namespace

IdxBytes read_idx(const std::string& path) {
  std::error_code ec;
  const auto file_size = std::filesystem::file_size(path, ec);
  TG_CHECK(!ec, "read_idx: cannot open ", path, " (", ec.message(), ")");
  const bool gz = is_gzip(path);
  // The most payload bytes this file can hold: itself when raw, its inflated bound when gzip.
  const int64_t bound = gz ? static_cast<int64_t>(file_size) * kMaxDeflateRatio + 64 : static_cast<int64_t>(file_size);

  GzFile f(gzopen(path.c_str(), "rb"));
  TG_CHECK(f != nullptr, "read_idx: cannot open ", path);

  uint8_t magic[4];
  TG_CHECK(read_some(f.get(), magic, 4, path) == 4, "read_idx: ", path, ": truncated header (fewer than 4 bytes)");
  TG_CHECK(magic[0] == 0 && magic[1] == 0, "read_idx: ", path, ": not an IDX file (bad magic ",
           int(magic[0]), " ", int(magic[1]), ", expected 0 0)");
  TG_CHECK(magic[2] == 0x08, "read_idx: ", path, ": unsupported element type code 0x", std::hex, int(magic[2]),
           std::dec, " (only unsigned bytes, 0x08, are supported)");
  const int ndim = magic[3];
  TG_CHECK(ndim >= 1 && ndim <= 4, "read_idx: ", path, ": expected 1 to 4 dims, got ", ndim);

  IdxBytes out;
  uint8_t raw_dims[16];
  TG_CHECK(read_some(f.get(), raw_dims, 4 * ndim, path) == 4 * ndim, "read_idx: ", path,
           ": truncated header (expected ", ndim, " dims)");
  for (int d = 0; d < ndim; ++d) {
    const uint8_t* b = raw_dims + 4 * d;
    out.dims.push_back((int64_t(b[0]) << 24) | (int64_t(b[1]) << 16) | (int64_t(b[2]) << 8) | int64_t(b[3]));
  }
  // [60000, 0, 28] holds no bytes whatever the file's size.
  const int64_t numel = numel_within(out.dims, bound);
  TG_CHECK(numel >= 0, "read_idx: ", path, ": dims ", format_shape(out.dims), " need more bytes than ",
           gz ? "a gzip file of this size can inflate to" : "the file holds", " (", file_size, " bytes)");
  // An empty shape's other dims must still multiply within int64 (their product is a stride),
  // or [0, 0xfffc0000, 0xe7ffffff] overflows contiguous_strides.
  checked_numel(out.dims, "read_idx", (path + ": dims").c_str());

  // The header's dims are only a claim: a gzip file of 1 MB may say 1 GB. The payload is read in
  // chunks, kept until the stream has delivered all it promised, so memory follows what the
  // stream really holds (plus one chunk), never what the header says.
  std::vector<std::vector<uint8_t>> chunks;
  int64_t got = 0;
  while (got < numel) {
    const int64_t want = std::min<int64_t>(numel - got, kReadChunkBytes);
    std::vector<uint8_t> chunk(static_cast<size_t>(want));
    const int64_t n = read_some(f.get(), chunk.data(), want, path);
    got += n;
    if (n < want) break;  // end of stream
    chunks.push_back(std::move(chunk));
  }
  TG_CHECK(got == numel, "read_idx: ", path, ": truncated: dims ", format_shape(out.dims), " need ", numel,
           " bytes of data, the ", gz ? "gzip stream" : "file", " has ", got);
  // Complete: one buffer of exactly the payload, each chunk freed once copied.
  out.data.reserve(static_cast<size_t>(numel));
  for (auto& c : chunks) {
    out.data.insert(out.data.end(), c.begin(), c.end());
    std::vector<uint8_t>().swap(c);
  }
  // Reading past the payload makes zlib check the gzip trailer (CRC and length) and shows
  // whether the file is longer than its header says.
  uint8_t extra[1];
  TG_CHECK(read_some(f.get(), extra, 1, path) == 0, "read_idx: ", path, ": file is longer than its dims ",
           format_shape(out.dims), " say (trailing bytes after the payload)");
  return out;
}

Tensor load_idx_images(const std::string& path) {
  IdxBytes idx = read_idx(path);
  TG_CHECK(idx.dims.size() == 3, "load_idx_images: ", path, ": expected 3 dims (N, H, W), got ",
           format_shape(idx.dims));
  Tensor t = Tensor::empty(idx.dims, DType::Float32);
  float* dst = t.data<float>();
  for (size_t i = 0; i < idx.data.size(); ++i) dst[i] = static_cast<float>(idx.data[i]) / 255.0f;
  return t;
}

Tensor load_idx_labels(const std::string& path) {
  IdxBytes idx = read_idx(path);
  TG_CHECK(idx.dims.size() == 1, "load_idx_labels: ", path, ": expected 1 dim (N), got ", format_shape(idx.dims));
  Tensor t = Tensor::empty(idx.dims, DType::Int64);
  int64_t* dst = t.data<int64_t>();
  for (size_t i = 0; i < idx.data.size(); ++i) dst[i] = idx.data[i];
  return t;
}

}  // namespace tg
