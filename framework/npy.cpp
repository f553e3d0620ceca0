#include "npy.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <vector>

#include "atomic_file.h"
#include "checked_math.h"

namespace tg {

namespace {

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  Shape shape;
};

NpyHeader parse_header(const std::string& h, const std::string& path) {
  NpyHeader out;
  std::smatch m;
  TG_CHECK(std::regex_search(h, m, std::regex("'descr'\\s*:\\s*'([^']*)'")), "load_npy: ", path,
           ": header has no 'descr': ", h);
  out.descr = m[1];
  TG_CHECK(std::regex_search(h, m, std::regex("'fortran_order'\\s*:\\s*(True|False)")), "load_npy: ", path,
           ": header has no 'fortran_order': ", h);
  out.fortran_order = m[1] == "True";
  TG_CHECK(std::regex_search(h, m, std::regex("'shape'\\s*:\\s*\\(([^)]*)\\)")), "load_npy: ", path,
           ": header has no 'shape': ", h);
  // The tuple must be integers separated by commas (a trailing comma allowed), nothing else:
  // "(2, x)" is a corrupt header, not the shape (2,).
  const std::string dims = m[1];
  TG_CHECK(std::regex_match(dims, std::regex("\\s*(-?\\d+\\s*(,\\s*-?\\d+\\s*)*,?\\s*)?")), "load_npy: ", path,
           ": invalid shape (", dims, ")");
  std::regex num("-?\\d+");
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), num); it != std::sregex_iterator(); ++it) {
    const std::string digits = it->str();
    // More than 13 digits cannot be below 2^40; checking the length first keeps stoll in range.
    const long long v = digits.size() > 14 ? -1 : std::stoll(digits);
    TG_CHECK(v >= 0 && v < (1LL << 40), "load_npy: ", path, ": invalid dimension ", digits, " in shape (", dims, ")");
    out.shape.push_back(v);
  }
  return out;
}

}  // namespace

Tensor load_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  TG_CHECK(f.good(), "load_npy: cannot open ", path);
  const int64_t file_size = static_cast<int64_t>(f.tellg());
  f.seekg(0);
  char magic[8] = {};
  TG_CHECK(file_size >= 10 && f.read(magic, 8) && std::memcmp(magic, "\x93NUMPY", 6) == 0, "load_npy: ", path,
           " is not a .npy file (bad magic or too short)");
  const int major = static_cast<unsigned char>(magic[6]);
  TG_CHECK(major >= 1 && major <= 3, "load_npy: ", path, ": unsupported format version ", major);
  int64_t header_len = 0;
  int64_t prefix = 0;
  if (major == 1) {
    unsigned char len[2];
    f.read(reinterpret_cast<char*>(len), 2);
    header_len = len[0] | (len[1] << 8);
    prefix = 10;
  } else {
    unsigned char len[4];
    TG_CHECK(file_size >= 12 && f.read(reinterpret_cast<char*>(len), 4), "load_npy: ", path, ": truncated header");
    header_len = int64_t(len[0]) | (int64_t(len[1]) << 8) | (int64_t(len[2]) << 16) | (int64_t(len[3]) << 24);
    prefix = 12;
  }
  TG_CHECK(prefix + header_len <= file_size, "load_npy: ", path, ": header of ", header_len,
           " bytes runs past the end of the file (", file_size, " bytes)");
  std::string header(static_cast<size_t>(header_len), '\0');
  f.read(header.data(), header_len);
  NpyHeader h = parse_header(header, path);
  TG_CHECK(!h.fortran_order, "load_npy: ", path, ": Fortran-order arrays are not supported; save with "
           "np.ascontiguousarray first");

  DType dtype;
  int64_t item = 8;
  bool from_int32 = false;
  if (h.descr == "<f4") dtype = DType::Float32, item = 4;
  else if (h.descr == "<f8") dtype = DType::Float64;
  else if (h.descr == "<i8") dtype = DType::Int64;
  else if (h.descr == "<i4") dtype = DType::Int64, item = 4, from_int32 = true;
  else TG_ERROR("load_npy: ", path, ": unsupported dtype '", h.descr, "' (expected <f4, <f8, <i8 or <i4)");

  int64_t numel = 1;
  for (int64_t d : h.shape) {
    TG_CHECK(d == 0 || numel <= file_size / d, "load_npy: ", path, ": shape ", format_shape(h.shape),
             " is larger than the file");
    numel *= d;
  }
  // A zero dim keeps numel at 0; the product of the others must still fit ((0, 2^40-1, 2^40-1)).
  checked_numel(h.shape, "load_npy", (path + ": shape").c_str());
  const int64_t data_bytes = numel * item;
  TG_CHECK(prefix + header_len + data_bytes <= file_size, "load_npy: ", path, ": truncated: shape ",
           format_shape(h.shape), " needs ", data_bytes, " bytes of data, the file has ",
           file_size - prefix - header_len);
  Tensor t = Tensor::empty(h.shape, dtype);
  if (from_int32) {
    std::vector<int32_t> tmp(static_cast<size_t>(numel));
    f.read(reinterpret_cast<char*>(tmp.data()), data_bytes);
    std::copy(tmp.begin(), tmp.end(), t.data<int64_t>());
  } else {
    f.read(static_cast<char*>(t.impl()->storage->data()), data_bytes);
  }
  TG_CHECK(f.good() || numel == 0, "load_npy: ", path, ": read failed");
  return t;
}

void save_npy(const std::string& path, const Tensor& t) {
  TG_CHECK(t.defined(), "save_npy: the tensor is undefined");
  Tensor c = t.contiguous();
  const char* descr = c.dtype() == DType::Float32 ? "<f4" : c.dtype() == DType::Float64 ? "<f8" : "<i8";
  std::string shape;
  for (int64_t d : c.shape()) shape += std::to_string(d) + ", ";
  if (c.dim() > 1) shape.resize(shape.size() - 2);
  else if (c.dim() == 1) shape.resize(shape.size() - 1);
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" + shape + "), }";
  // Pad so the data starts on a 64-byte boundary, ending the header with a newline.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string bytes = "\x93NUMPY";
  bytes.push_back('\x01');
  bytes.push_back('\x00');
  bytes.push_back(static_cast<char>(header.size() & 0xff));
  bytes.push_back(static_cast<char>(header.size() >> 8));
  bytes += header;
  const char* data = static_cast<const char*>(static_cast<const void*>(c.impl()->storage->data())) +
                     c.offset() * dtype_size(c.dtype());
  bytes.append(data, static_cast<size_t>(c.numel()) * dtype_size(c.dtype()));
  write_file_atomically(path, bytes);
}

}  // namespace tg
