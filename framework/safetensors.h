// safetensors checkpoints: an 8-byte little-endian header length, a JSON header
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {"key": "value"}}, then the raw little-endian tensor data. The format
// Hugging Face and PyTorch users exchange weights in; tapegrad reads and writes F32, F64, I64,
// BF16, F16 and I32 (a bf16 checkpoint of PyTorch loads and writes back bit for bit).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "state_dict.h"
#include "tensor.h"

namespace tg {

// safetensors' free-form string map (the "__metadata__" header entry).
using SafetensorsMetadata = std::map<std::string, std::string>;

struct SafetensorsFile {
  StateDict tensors;              // in the header's order
  SafetensorsMetadata metadata;   // empty when the file has none
};

// The bytes of a safetensors file: tensors sorted by name (in the header and in the data),
// any strides written in C order, `__metadata__` first when not empty, compact JSON with
// fields dtype, shape, data_offsets, the header padded with spaces to a multiple of 8 bytes.
// This matches tools/fixtures/io.py's writer byte for byte. Duplicate or empty names, the
// reserved name "__metadata__" and undefined tensors throw tg::Error.
std::string serialize_safetensors(const StateDict& tensors, const SafetensorsMetadata& metadata = {});

// Writes serialize_safetensors(...) atomically (temporary file, flush, rename).
void save_safetensors(const std::string& path, const StateDict& tensors, const SafetensorsMetadata& metadata = {});

// Reads a safetensors file. The file is untrusted: the header length, JSON syntax, dtypes,
// shapes and data_offsets are all checked against the file size before any tensor is
// allocated; offsets that overlap, leave a gap, stop short of the file's end, run past the
// data or disagree with shape x dtype size (the tensors must lie back to back, as Rust's
// reader requires), a NUL byte in the header, duplicate names and unsupported dtypes (U8,
// F8_E4M3, BOOL, ...) throw tg::Error naming the file and the tensor.
SafetensorsFile load_safetensors(const std::string& path);
// The same from bytes in memory; `what` names the source in messages.
SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& what = "<memory>");

// What load_state_dict found, by name, PyTorch's way.
struct LoadStateDictReport {
  std::vector<std::string> missing_keys;     // in the target, absent from the source
  std::vector<std::string> unexpected_keys;  // in the source, absent from the target
  std::vector<std::string> mismatches;       // "name: shape [2, 3] in the file, [3, 2] in the target" or dtype
  bool ok() const { return missing_keys.empty() && unexpected_keys.empty() && mismatches.empty(); }
  std::string to_string() const;  // every problem, one per line
};

// Copies source tensors into the target's tensors of the same name, in place (the target's
// tensors keep their identity, so a module's parameters are updated, without recording on
// the tape). As PyTorch's param.copy_(input_param), values are converted to the target's
// dtype: a float32 checkpoint loads into a bfloat16 or float16 model (rounded to nearest even
// once), float64 into float32, int64 into int32. A floating tensor and an integer one do not
// meet (PyTorch would convert them; that is almost always a wrong checkpoint): that and shape
// mismatches always throw; with strict, missing or unexpected keys throw too. A throw lists every problem and copies nothing. Without strict
// the report of missing and unexpected keys is returned and the matching tensors are copied.
LoadStateDictReport load_state_dict(const StateDict& target, const StateDict& source, bool strict = true);

// load_safetensors(path) then load_state_dict(target, its tensors, strict).
LoadStateDictReport load_state_dict_from_file(const StateDict& target, const std::string& path, bool strict = true);

}  // namespace tg
