#include "npy.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <istream>
#include <streambuf>
#include <vector>

#include "atomic_file.h"
#include "checked_math.h"

namespace tg {

namespace {

// numpy's read_array refuses headers longer than this unless told otherwise (max_header_size);
// the headers of the dtypes we read are under 200 bytes. The bound keeps a forged length from
// making the parser and its messages work on megabytes.
constexpr int64_t kMaxNpyHeaderBytes = 10000;

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  Shape shape;
};

// Up to 200 characters of s, for messages that quote untrusted text; bytes that are not
// printable ASCII appear as \xNN.
std::string excerpt(const std::string& s) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < s.size() && i < 200; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      out += "\\x";
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  if (s.size() > 200) out += "...";
  return out;
}

// A hand-written reader of the Python dict literal numpy writes,
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// with any whitespace, key order and quote style, trailing commas, and shapes (), (n,) and
// (n, m, ...). It walks the text once with an index and no recursion (std::regex recursed once
// per character and overflowed the stack on long headers). Keys other than the three are
// skipped when their value is a simple literal (string, True/False/None, integer, tuple of
// integers), so a header with an extra field still loads.
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& where) : s_(text), where_(where) {}

  NpyHeader parse() {
    NpyHeader out;
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    skip_space();
    expect('{', "'{' opening the header dict");
    skip_space();
    while (peek() != '}') {
      const std::string key = read_string("a quoted key");
      skip_space();
      expect(':', "':' after key '" + excerpt(key) + "'");
      skip_space();
      auto once = [&](bool& seen) {
        TG_CHECK(!seen, where_, "header has key '", key, "' twice: ", excerpt(s_));
        seen = true;
      };
      if (key == "descr") {
        once(seen_descr);
        out.descr = read_string("a quoted dtype string for 'descr'");
      } else if (key == "fortran_order") {
        once(seen_fortran);
        out.fortran_order = read_bool();
      } else if (key == "shape") {
        once(seen_shape);
        out.shape = read_shape();
      } else {
        skip_literal(key);
      }
      skip_space();
      if (peek() == ',') {
        ++i_;
        skip_space();
      } else if (peek() != '}') {
        fail("',' or '}' after the value of '" + excerpt(key) + "'");
      }
    }
    // What follows the '}' is padding (numpy writes spaces and a '\n'). It carries nothing, so
    // as with the regex reader a damaged padding byte does not make the array unreadable.
    TG_CHECK(seen_descr, where_, "header has no 'descr': ", excerpt(s_));
    TG_CHECK(seen_fortran, where_, "header has no 'fortran_order': ", excerpt(s_));
    TG_CHECK(seen_shape, where_, "header has no 'shape': ", excerpt(s_));
    return out;
  }

 private:
  // '\0' at the end: the header never legitimately contains one, so it ends every loop.
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  [[noreturn]] void fail(const std::string& expected) const {
    TG_ERROR(where_, "malformed header: expected ", expected, " at offset ", i_, ", found ",
             i_ < s_.size() ? "'" + excerpt(s_.substr(i_, 20)) + "'" : std::string("the end of the header"),
             " in ", excerpt(s_));
  }
  void expect(char c, const std::string& what) {
    if (peek() != c) fail(what);
    ++i_;
  }
  bool starts_with(const char* word) const { return s_.compare(i_, std::strlen(word), word) == 0; }

  // A '...' or "..." string without escapes (numpy's dtype strings never have them).
  std::string read_string(const std::string& what) {
    const char q = peek();
    if (q != '\'' && q != '"') fail(what);
    const size_t end = s_.find(q, i_ + 1);
    if (end == std::string::npos || s_.find('\\', i_ + 1) < end) fail(what + " (unterminated or escaped string)");
    std::string out = s_.substr(i_ + 1, end - i_ - 1);
    i_ = end + 1;
    return out;
  }

  bool read_bool() {
    if (starts_with("True")) {
      i_ += 4;
      return true;
    }
    if (!starts_with("False")) fail("True or False for 'fortran_order'");
    i_ += 5;
    return false;
  }

  // The text from here to the closing ')' (or 40 characters), for shape messages.
  std::string tuple_text(size_t open) const {
    const size_t close = s_.find(')', open);
    return close == std::string::npos ? excerpt(s_.substr(open, 40)) : excerpt(s_.substr(open, close - open + 1));
  }

  // (), (n,), (n, m), (n, m,): integers separated by commas, nothing else: "(2, x)" is a corrupt
  // header, not the shape (2,). "(n)" is the integer n in Python, not a tuple: numpy refuses it.
  Shape read_shape() {
    const size_t open = i_;
    if (peek() != '(') fail("a tuple for 'shape'");
    ++i_;
    Shape shape;
    bool comma_after_last = false;
    skip_space();
    while (peek() != ')') {
      const size_t start = i_;
      if (peek() == '-') ++i_;
      while (peek() >= '0' && peek() <= '9') ++i_;
      const std::string digits = s_.substr(start, i_ - start);
      if (peek() == 'L') ++i_;  // Python 2's numpy wrote longs as (2L, 3L)
      TG_CHECK(!digits.empty() && digits != "-", where_, "invalid shape ", tuple_text(open));
      // More than 13 digits cannot be below 2^40; checking the length first keeps stoll in range.
      const long long v = digits.size() > 14 ? -1 : std::stoll(digits);
      TG_CHECK(v >= 0 && v < (1LL << 40), where_, "invalid dimension ", excerpt(digits), " in shape ",
               tuple_text(open));
      shape.push_back(v);
      skip_space();
      comma_after_last = peek() == ',';
      if (comma_after_last) {
        ++i_;
        skip_space();
      } else {
        TG_CHECK(peek() == ')', where_, "invalid shape ", tuple_text(open));
      }
    }
    TG_CHECK(shape.size() != 1 || comma_after_last, where_, "invalid shape ", tuple_text(open),
             ": a tuple of one dim is written with a comma, (n,), as numpy refuses (n)");
    ++i_;
    return shape;
  }

  // The value of a key we do not use: a string, True/False/None, an integer or a tuple of
  // integers. Anything else (a list, a nested dict) is not what numpy writes.
  void skip_literal(const std::string& key) {
    const char c = peek();
    if (c == '\'' || c == '"') read_string("a string");
    else if (c == '(') read_shape();
    else if (starts_with("True")) i_ += 4;
    else if (starts_with("False")) i_ += 5;
    else if (starts_with("None")) i_ += 4;
    else if (c == '-' || (c >= '0' && c <= '9')) {
      if (c == '-') ++i_;
      while (peek() >= '0' && peek() <= '9') ++i_;
    } else {
      fail("a simple value (string, True, False, None, integer or tuple) for key '" + excerpt(key) + "'");
    }
  }

  const std::string& s_;
  const std::string& where_;
  size_t i_ = 0;
};

// The little-endian descr strings numpy writes for the dtypes tapegrad has. bfloat16 has none:
// numpy has no bfloat16 type (ml_dtypes' bfloat16 saves as an anonymous 2-byte void, '|V2',
// which loses the type), and PyTorch's .numpy() refuses bfloat16. A bfloat16 tensor goes to
// safetensors ("BF16"), or to npy as float32, which holds every bfloat16 value exactly.
const char* npy_descr(DType t) {
  switch (t) {
    case DType::Float32: return "<f4";
    case DType::Float64: return "<f8";
    case DType::Float16: return "<f2";
    case DType::Int64: return "<i8";
    case DType::Int32: return "<i4";
    default: return nullptr;
  }
}

bool npy_dtype(const std::string& descr, DType& out) {
  for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::Int64, DType::Int32}) {
    if (descr == npy_descr(t)) {
      out = t;
      return true;
    }
  }
  return false;
}

// What an unsupported descr message adds: a 2-byte void is most likely a bfloat16 array.
std::string npy_dtype_hint(const std::string& descr) {
  std::string hint = "expected <f2, <f4, <f8, <i4 or <i8";
  if (descr == "|V2" || descr == "<V2" || descr == ">V2") {
    hint += "; a 2-byte void is how numpy saves an ml_dtypes bfloat16 array, without its type: save bfloat16 "
            "with safetensors, or as float32 (exact)";
  }
  return hint;
}

// The reader shared by load_npy (a file) and parse_npy (bytes): `in` holds `size` bytes.
Tensor read_npy(std::istream& in, int64_t file_size, const std::string& path) {
  char magic[8] = {};
  TG_CHECK(file_size >= 10 && in.read(magic, 8) && std::memcmp(magic, "\x93NUMPY", 6) == 0, "load_npy: ", path,
           " is not a .npy file (bad magic or too short)");
  const int major = static_cast<unsigned char>(magic[6]), minor = static_cast<unsigned char>(magic[7]);
  TG_CHECK(major >= 1 && major <= 3 && minor == 0, "load_npy: ", path, ": unsupported format version ", major, ".",
           minor, " (numpy writes 1.0, 2.0 and 3.0)");
  int64_t header_len = 0;
  int64_t prefix = 0;
  if (major == 1) {
    unsigned char len[2];
    TG_CHECK(in.read(reinterpret_cast<char*>(len), 2), "load_npy: ", path, ": truncated header");
    header_len = len[0] | (len[1] << 8);
    prefix = 10;
  } else {
    unsigned char len[4];
    TG_CHECK(file_size >= 12 && in.read(reinterpret_cast<char*>(len), 4), "load_npy: ", path, ": truncated header");
    header_len = int64_t(len[0]) | (int64_t(len[1]) << 8) | (int64_t(len[2]) << 16) | (int64_t(len[3]) << 24);
    prefix = 12;
  }
  TG_CHECK(prefix + header_len <= file_size, "load_npy: ", path, ": header of ", header_len,
           " bytes runs past the end of the file (", file_size, " bytes)");
  TG_CHECK(header_len <= kMaxNpyHeaderBytes, "load_npy: ", path, ": header of ", header_len,
           " bytes exceeds the limit of ", kMaxNpyHeaderBytes,
           " bytes (numpy's default max_header_size; the dtypes tapegrad reads need under 200)");
  std::string header(static_cast<size_t>(header_len), '\0');
  TG_CHECK(in.read(header.data(), header_len), "load_npy: ", path, ": read failed");
  const std::string where = "load_npy: " + path + ": ";
  NpyHeader h = HeaderParser(header, where).parse();
  TG_CHECK(!h.fortran_order, "load_npy: ", path, ": Fortran-order arrays are not supported; save with "
           "np.ascontiguousarray first");

  DType dtype;
  TG_CHECK(npy_dtype(h.descr, dtype), "load_npy: ", path, ": unsupported dtype '", excerpt(h.descr), "' (",
           npy_dtype_hint(h.descr), ")");
  const int64_t item = static_cast<int64_t>(dtype_size(dtype));

  // (1000, 0) holds no data: a 128-byte file.
  const int64_t numel = numel_within(h.shape, file_size);
  TG_CHECK(numel >= 0, "load_npy: ", path, ": shape ", format_shape(h.shape), " is larger than the file");
  // An empty shape's other dims must still multiply within int64, or the strides would
  // overflow: (0, 2^40-1, 2^40-1) holds no data and is refused.
  checked_numel(h.shape, "load_npy", (path + ": shape").c_str());
  const int64_t data_bytes = numel * item;
  TG_CHECK(prefix + header_len + data_bytes <= file_size, "load_npy: ", path, ": truncated: shape ",
           format_shape(h.shape), " needs ", data_bytes, " bytes of data, the file has ",
           file_size - prefix - header_len);
  Tensor t = Tensor::empty(h.shape, dtype);
  in.read(static_cast<char*>(t.impl()->storage->data()), data_bytes);
  TG_CHECK(in.good() || numel == 0, "load_npy: ", path, ": read failed");
  return t;
}

// A read-only std::streambuf over bytes in memory, so parse_npy shares read_npy without a copy.
struct MemoryBuf : std::streambuf {
  MemoryBuf(const char* p, size_t n) {
    char* b = const_cast<char*>(p);  // get area only: never written through
    setg(b, b, b + n);
  }
};

}  // namespace

Tensor load_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  TG_CHECK(f.good(), "load_npy: cannot open ", path);
  const int64_t file_size = static_cast<int64_t>(f.tellg());
  TG_CHECK(file_size >= 0, "load_npy: cannot read ", path, " (not a regular file?)");
  f.seekg(0);
  return read_npy(f, file_size, path);
}

Tensor parse_npy(const std::string& bytes, const std::string& what) {
  MemoryBuf buf(bytes.data(), bytes.size());
  std::istream in(&buf);
  return read_npy(in, static_cast<int64_t>(bytes.size()), what);
}

void save_npy(const std::string& path, const Tensor& t) {
  TG_CHECK(t.defined(), "save_npy: the tensor is undefined");
  Tensor c = t.contiguous();
  const char* descr = npy_descr(c.dtype());
  TG_CHECK(descr != nullptr, "save_npy: ", path, ": numpy has no ", dtype_name(c.dtype()),
           " dtype, so a .npy file cannot say what its bytes are: save it with save_safetensors (\"BF16\"), or "
           "as t.to(DType::Float32), which holds every bfloat16 value exactly");
  std::string shape;
  for (int64_t d : c.shape()) shape += std::to_string(d) + ", ";
  if (c.dim() > 1) shape.resize(shape.size() - 2);
  else if (c.dim() == 1) shape.resize(shape.size() - 1);
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" + shape + "), }";
  // As numpy 1.24 writes it (format.py): the dict, spare spaces for the first dim to grow to 21
  // digits in place, then 1 to 64 spaces and a newline up to a 64-byte boundary.
  if (c.dim() > 0) header.append(21 - std::to_string(c.size(0)).size(), ' ');
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header.push_back('\n');
  // (Format 1.0's 2-byte length would need format 2.0 past 65,535 bytes, but no reader takes a
  // header that long: numpy's limit, and load_npy's, is 10,000 bytes, about 2,900 dims.)
  TG_CHECK(static_cast<int64_t>(header.size()) <= kMaxNpyHeaderBytes, "save_npy: ", path, ": a tensor of ", c.dim(),
           " dims needs a header of ", header.size(), " bytes, past the ", kMaxNpyHeaderBytes,
           " that numpy and load_npy read (max_header_size)");
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
