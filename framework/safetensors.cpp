#include "safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "atomic_file.h"
#include "checked_math.h"
#include "grad_mode.h"

namespace tg {

namespace {

// Headers are parsed into nlohmann::json (objects are std::maps: a header of n tensors costs
// n log n; ordered_json searches a vector on every insert, which made a 12 MB header of 200,000
// empty tensors take a minute), and the file's order of tensors is kept beside it.
using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;  // for writing: a tensor's keys in the reference order

// The Rust reference implementation refuses headers over 100 MB; so do we, so that a forged
// length cannot make us read a huge header into memory.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// Structure no valid header exceeds (see parse_header_json).
constexpr size_t kMaxDepth = 3;
constexpr size_t kMaxArrayLength = 64;

// safetensors' dtype names for tapegrad's dtypes, in one table both directions read.
constexpr std::pair<DType, const char*> kStDtypes[] = {
    {DType::Float32, "F32"}, {DType::Float64, "F64"}, {DType::Int64, "I64"},
    {DType::BFloat16, "BF16"}, {DType::Float16, "F16"}, {DType::Int32, "I32"},
};

const char* st_dtype(DType t) {
  for (const auto& [d, s] : kStDtypes)
    if (d == t) return s;
  TG_ERROR("save_safetensors: no safetensors name for dtype ", dtype_name(t));
}

bool parse_st_dtype(const std::string& s, DType& out) {
  for (const auto& [d, name] : kStDtypes) {
    if (s == name) {
      out = d;
      return true;
    }
  }
  return false;
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

uint64_t read_u64_le(const unsigned char* b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[i];
  return v;
}

// A non-negative integer that fits in 62 bits (so sums and products below cannot overflow).
bool as_size(const json& j, uint64_t& out) {
  if (!j.is_number_integer()) return false;
  if (j.is_number_unsigned()) out = j.get<uint64_t>();
  else {
    const int64_t v = j.get<int64_t>();
    if (v < 0) return false;
    out = static_cast<uint64_t>(v);
  }
  return out < (uint64_t(1) << 62);
}

// j's compact text; a name or value that is not valid UTF-8 is an error (error_handler strict).
template <class Json>
std::string json_text(const Json& j) {
  try {
    return j.dump(-1, ' ', false, json::error_handler_t::strict);
  } catch (const json::exception& e) {
    TG_ERROR("save_safetensors: a tensor name or metadata string is not valid UTF-8 (", e.what(), ")");
  }
}

}  // namespace

std::string serialize_safetensors(const StateDict& tensors, const SafetensorsMetadata& metadata) {
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors[a].first < tensors[b].first; });

  // The header's text is written entry by entry (one ordered_json of n entries would cost n^2):
  // __metadata__ first, then the tensors in name order, each with dtype, shape, data_offsets.
  std::string text = "{";
  if (!metadata.empty()) text += "\"__metadata__\":" + json_text(json(metadata));
  std::vector<Tensor> data;
  uint64_t offset = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const auto& [name, t] = tensors[order[k]];
    TG_CHECK(!name.empty(), "save_safetensors: tensor names must not be empty");
    TG_CHECK(name != "__metadata__", "save_safetensors: \"__metadata__\" is reserved and cannot name a tensor");
    TG_CHECK(k == 0 || tensors[order[k - 1]].first != name, "save_safetensors: duplicate tensor name \"", name, "\"");
    TG_CHECK(t.defined(), "save_safetensors: tensor \"", name, "\" is undefined");
    TG_CHECK(t.dim() <= static_cast<int64_t>(kMaxArrayLength), "save_safetensors: tensor \"", name, "\" has ", t.dim(),
             " dims; a header's shape holds at most ", kMaxArrayLength, " (load_safetensors refuses more)");
    Tensor c = t.contiguous();
    const uint64_t bytes = static_cast<uint64_t>(c.numel()) * dtype_size(c.dtype());
    ordered_json e = ordered_json::object();
    e["dtype"] = st_dtype(c.dtype());
    e["shape"] = c.shape();
    e["data_offsets"] = {offset, offset + bytes};
    if (text.size() > 1) text += ",";
    text += json_text(json(name)) + ":" + json_text(e);
    offset += bytes;
    data.push_back(c);
  }
  text += "}";
  text.append((8 - text.size() % 8) % 8, ' ');

  std::string out;
  out.reserve(8 + text.size() + offset);
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += text;
  for (const Tensor& c : data) {
    if (c.numel() == 0) continue;
    const char* p = static_cast<const char*>(static_cast<const void*>(c.impl()->storage->data())) +
                    c.offset() * dtype_size(c.dtype());
    out.append(p, static_cast<size_t>(c.numel()) * dtype_size(c.dtype()));
  }
  return out;
}

void save_safetensors(const std::string& path, const StateDict& tensors, const SafetensorsMetadata& metadata) {
  write_file_atomically(path, serialize_safetensors(tensors, metadata));
}

namespace {

// The steps of parse_safetensors, in the order it runs them. `where` ("load_safetensors: <what>: ")
// begins every message.

// The header length: the file's first 8 bytes, little-endian, checked against the size limit
// and the file.
uint64_t read_header_length(const std::string& bytes, const std::string& where) {
  TG_CHECK(bytes.size() >= 8, where, "file of ", bytes.size(), " bytes is too short for the 8-byte header length");
  const uint64_t header_len = read_u64_le(reinterpret_cast<const unsigned char*>(bytes.data()));
  TG_CHECK(header_len <= kMaxHeaderBytes, where, "header length ", header_len, " exceeds the ", kMaxHeaderBytes,
           "-byte limit");
  TG_CHECK(header_len <= bytes.size() - 8, where, "header length ", header_len, " runs past the end of the file (",
           bytes.size(), " bytes)");
  TG_CHECK(header_len >= 2, where, "header of ", header_len, " bytes cannot hold a JSON object");
  return header_len;
}

// The header JSON, which must be an object with no key twice, and its keys in the file's order.
struct Header {
  json entries;
  std::vector<std::string> order;
};

// A first pass over the header's JSON, as SAX events, before any of it is built: JSON itself
// lets a later duplicate key silently replace an earlier one, and a checkpoint with two entries
// of one name is corrupt; no safetensors header nests deeper than header -> tensor -> shape (a
// 100 MB "[[[[..." would otherwise cost gigabytes of nodes and recursion in dump()), nor holds
// an array longer than kMaxArrayLength (a shape of millions of dims). It also keeps the order of
// the tensors. (nlohmann's parse callback could watch for the same, but its parser then scans
// the whole parent object at the end of each entry: quadratic in the number of tensors.)
class HeaderChecker : public nlohmann::json_sax<json> {
 public:
  explicit HeaderChecker(const std::string& where) : where_(where) {}
  std::vector<std::string> order;
  std::string duplicate, error;

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(false); }
  bool start_array(std::size_t) override { return open(true); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    if (!open_.back().keys.insert(k).second && duplicate.empty()) duplicate = k;
    if (open_.size() == 1) order.push_back(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error = e.what();
    return false;
  }

 private:
  struct Container {
    bool is_array;
    size_t count;
    std::set<std::string> keys;
  };
  bool value() {
    if (!open_.empty() && open_.back().is_array)
      TG_CHECK(++open_.back().count <= kMaxArrayLength, where_, "header has an array longer than ", kMaxArrayLength,
               " elements (a shape has at most ", kMaxArrayLength, " dims, data_offsets 2)");
    return true;
  }
  bool open(bool is_array) {
    value();
    TG_CHECK(open_.size() < kMaxDepth, where_, "header nests deeper than ", kMaxDepth,
             " levels (header -> tensor -> shape)");
    open_.push_back({is_array, 0, {}});
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }
  const std::string& where_;
  std::vector<Container> open_;
};

Header parse_header_json(const std::string& bytes, uint64_t header_len, const std::string& where) {
  const auto first = bytes.begin() + 8, last = first + static_cast<std::ptrdiff_t>(header_len);
  // The JSON parser reads a NUL byte as the end of its input, so "{...}\0<anything>" would
  // pass; JSON text never holds one (a string's control characters are escaped).
  const auto nul = std::find(first, last, '\0');
  TG_CHECK(nul == last, where, "header holds a NUL byte at byte ", nul - first,
           " of its ", header_len, " (JSON text never does; padding is spaces)");
  HeaderChecker checker(where);
  const bool valid = json::sax_parse(first, last, &checker);
  TG_CHECK(valid, where, "header is not valid JSON (", checker.error, ")");
  TG_CHECK(checker.duplicate.empty(), where, "key \"", checker.duplicate, "\" appears more than once in the header");
  Header header;
  header.entries = json::parse(first, last);  // valid, and within the limits above
  TG_CHECK(header.entries.is_object(), where, "header must be a JSON object, got ", header.entries.type_name());
  header.order = std::move(checker.order);
  return header;
}

// The "__metadata__" entry: an object of strings.
void read_metadata(const json& v, const std::string& where, SafetensorsMetadata& metadata) {
  TG_CHECK(v.is_object(), where, "__metadata__ must be an object of strings, got ", v.type_name());
  for (auto m = v.begin(); m != v.end(); ++m) {
    TG_CHECK(m.value().is_string(), where, "__metadata__[\"", m.key(), "\"] must be a string, got ",
             m.value().type_name());
    metadata[m.key()] = m.value().get<std::string>();
  }
}

// One tensor's entry: its dtype, shape and data_offsets, checked against the data section of
// data_size bytes.
Entry read_entry(const std::string& name, const json& v, uint64_t data_size, const std::string& where) {
  const std::string t = where + "tensor \"" + name + "\": ";
  TG_CHECK(v.is_object(), t, "expected an object with dtype, shape and data_offsets, got ", v.type_name());
  TG_CHECK(v.contains("dtype") && v["dtype"].is_string(), t, "missing or non-string \"dtype\"");
  TG_CHECK(v.contains("shape") && v["shape"].is_array(), t, "missing or non-array \"shape\"");
  TG_CHECK(v.contains("data_offsets") && v["data_offsets"].is_array() && v["data_offsets"].size() == 2, t,
           "\"data_offsets\" must be an array [begin, end]");
  Entry e;
  e.name = name;
  const std::string dt = v["dtype"].get<std::string>();
  TG_CHECK(parse_st_dtype(dt, e.dtype), t, "unsupported dtype \"", dt, "\" (expected F32, F64, I64, BF16, F16 or I32)");
  for (const auto& d : v["shape"]) {
    uint64_t dim = 0;
    TG_CHECK(as_size(d, dim), t, "shape ", v["shape"].dump(), " has an invalid dimension ", d.dump());
    e.shape.push_back(static_cast<int64_t>(dim));
  }
  // [1, 0] holds no data: valid in a file with no data section at all.
  const int64_t numel = numel_within(e.shape, static_cast<int64_t>(data_size));
  TG_CHECK(numel >= 0, t, "shape ", v["shape"].dump(), " is larger than the file's ", data_size, " bytes of data");
  // An empty shape's other dims must still multiply within int64, or the strides would
  // overflow: [0, 2^40, 2^40, 2^40] holds no data and is refused.
  checked_numel(e.shape, t.substr(0, t.size() - 2).c_str(), "shape");
  TG_CHECK(as_size(v["data_offsets"][0], e.begin) && as_size(v["data_offsets"][1], e.end), t,
           "data_offsets ", v["data_offsets"].dump(), " must be non-negative integers");
  TG_CHECK(e.begin <= e.end && e.end <= data_size, t, "data_offsets ", v["data_offsets"].dump(),
           " fall outside the data section of ", data_size, " bytes");
  const uint64_t need = static_cast<uint64_t>(numel) * dtype_size(e.dtype);
  TG_CHECK(e.end - e.begin == need, t, "data_offsets ", v["data_offsets"].dump(), " span ", e.end - e.begin,
           " bytes, but shape ", format_shape(e.shape), " of ", dt, " needs ", need);
  return e;
}

// The tensors, in the order of their offsets, must fill the data section exactly: each begins
// where the one before ends, and the last ends at the end of the file. That is what the
// reference reader (the Rust safetensors crate) requires; a gap, an overlap or trailing bytes
// mean the header does not describe the file.
void check_data_section_is_tiled(const std::vector<Entry>& entries, uint64_t data_size, const std::string& where) {
  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const Entry* a, const Entry* b) { return a->begin != b->begin ? a->begin < b->begin : a->end < b->end; });
  const Entry* prev = nullptr;
  for (const Entry* e : by_offset) {
    const uint64_t expected = prev ? prev->end : 0;
    if (e->begin != expected) {
      TG_CHECK(e->begin > expected || e->begin == e->end, where, "tensors \"", prev->name, "\" [", prev->begin, ", ",
               prev->end, ") and \"", e->name, "\" [", e->begin, ", ", e->end, ") overlap");
      TG_CHECK(false, where, "tensor \"", e->name, "\" begins at byte ", e->begin, " of the data section, expected ",
               expected, prev ? " (where \"" + prev->name + "\" ends)" : std::string(" (its start)"),
               ": the tensors must lie back to back");
    }
    prev = e;
  }
  const uint64_t end = prev ? prev->end : 0;
  TG_CHECK(end == data_size, where, "the tensors end at byte ", end, " of the data section, but the file holds ",
           data_size, " bytes after the header (trailing bytes, or a header that does not describe the file)");
}

// The tensors of checked entries, copied out of the data section (the data is little-endian,
// as is the host).
StateDict build_tensors(const std::vector<Entry>& entries, const char* data) {
  StateDict tensors;
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (e.end > e.begin) std::memcpy(t.impl()->storage->data(), data + e.begin, e.end - e.begin);
    tensors.emplace_back(e.name, t);
  }
  return tensors;
}

}  // namespace

SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& what) {
  const std::string where = "load_safetensors: " + what + ": ";
  const uint64_t header_len = read_header_length(bytes, where);
  const uint64_t data_size = bytes.size() - 8 - header_len;
  const Header header = parse_header_json(bytes, header_len, where);

  SafetensorsFile out;
  std::vector<Entry> entries;
  for (const std::string& key : header.order) {
    const json& value = header.entries.at(key);
    if (key == "__metadata__") read_metadata(value, where, out.metadata);
    else entries.push_back(read_entry(key, value, data_size, where));
  }
  check_data_section_is_tiled(entries, data_size, where);

  // Everything is checked: now allocate and copy.
  out.tensors = build_tensors(entries, bytes.data() + 8 + header_len);
  return out;
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  TG_CHECK(f.good(), "load_safetensors: cannot open ", path);
  const std::streamoff size = f.tellg();
  // A folder opens, but its "size" is -1 or a huge hash-index position: never allocate it.
  std::error_code ec;
  TG_CHECK(size >= 0 && std::filesystem::is_regular_file(path, ec), "load_safetensors: ", path,
           " is not a regular file");
  f.seekg(0);
  // The whole file is read once (a checkpoint is loaded whole anyway); every size in the
  // header is then checked against these bytes.
  std::string bytes(static_cast<size_t>(size), '\0');
  TG_CHECK(f.read(bytes.data(), size), "load_safetensors: ", path, ": read failed");
  return parse_safetensors(bytes, path);
}

std::string LoadStateDictReport::to_string() const {
  std::string s;
  for (const auto& k : missing_keys) s += "  missing key: " + k + "\n";
  for (const auto& k : unexpected_keys) s += "  unexpected key: " + k + "\n";
  for (const auto& m : mismatches) s += "  mismatch: " + m + "\n";
  return s;
}

LoadStateDictReport load_state_dict(const StateDict& target, const StateDict& source, bool strict) {
  std::map<std::string, const Tensor*> src;
  for (const auto& [name, t] : source)
    TG_CHECK(src.emplace(name, &t).second, "load_state_dict: key \"", name, "\" appears twice in the source ",
             "(nothing was copied)");
  std::set<std::string> target_names;
  LoadStateDictReport report;
  std::vector<std::pair<Tensor, Tensor>> copies;
  for (const auto& [name, t] : target) {
    target_names.insert(name);
    auto it = src.find(name);
    if (it == src.end()) {
      report.missing_keys.push_back(name);
      continue;
    }
    Tensor s = *it->second;
    TG_CHECK(t.defined() && s.defined(), "load_state_dict: tensor \"", name, "\" is undefined");
    // PyTorch's rule for checkpoints of before 0-d tensors existed: one value of shape [1]
    // loads into a 0-d parameter or buffer (PyTorch takes element 0 of any 1-D tensor; a
    // longer one is a wrong checkpoint here).
    if (t.dim() == 0 && s.shape() == Shape{1}) s = s.reshape({});
    if (s.shape() != t.shape()) {
      report.mismatches.push_back(name + ": shape " + format_shape(s.shape()) + " in the source, " +
                                  format_shape(t.shape()) + " in the target");
    } else if (is_floating(s.dtype()) != is_floating(t.dtype())) {
      // PyTorch would copy_ an integer tensor into a floating one (or truncate the other
      // way); between kinds that is a wrong checkpoint far more often than an intent.
      report.mismatches.push_back(name + ": dtype " + dtype_name(s.dtype()) + " in the source, " +
                                  dtype_name(t.dtype()) + " in the target (one floating, one integer)");
    } else {
      copies.emplace_back(t, s);
    }
  }
  for (const auto& [name, t] : source) {
    if (!target_names.count(name)) report.unexpected_keys.push_back(name);
  }
  const bool fail = !report.mismatches.empty() || (strict && !report.ok());
  TG_CHECK(!fail, "load_state_dict: error(s) loading the state dict (nothing was copied):\n", report.to_string());
  // A checkpoint load is not part of the model's computation: no tape entries.
  NoGradGuard no_grad;
  // copy_ converts, as PyTorch's param.copy_(input_param) does: a float32 checkpoint loads
  // into a bfloat16 module rounded to nearest even once, an int64 buffer into an int32 one.
  for (auto& [dst, s] : copies) dst.copy_(s);
  return report;
}

LoadStateDictReport load_state_dict_from_file(const StateDict& target, const std::string& path, bool strict) {
  return load_state_dict(target, load_safetensors(path).tensors, strict);
}

}  // namespace tg
