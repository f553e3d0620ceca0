// libFuzzer driver for the safetensors reader: the input is the bytes of a .safetensors file,
// parsed in memory by parse_safetensors (load_safetensors runs it on a file's bytes). What loads
// is written back with serialize_safetensors and must parse again to the same tensors. A
// tg::Error is a correct refusal; any other exception, a crash or a sanitizer report is a
// finding. Seeds: fuzz/corpus/safetensors/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include <tapegrad/tapegrad.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  tg::SafetensorsFile file;
  try {
    file = tg::parse_safetensors(bytes, "fuzz.safetensors");
  } catch (const tg::Error&) {
    return 0;
  }
  std::string again;
  try {
    again = tg::serialize_safetensors(file.tensors, file.metadata);
  } catch (const tg::Error&) {
    return 0;  // e.g. an empty tensor name, which the reader accepts and the writer refuses
  }
  // The writer's output is a valid file holding the same tensors: refusing it is a bug.
  const tg::SafetensorsFile back = tg::parse_safetensors(again, "fuzz round trip");
  if (back.tensors.size() != file.tensors.size() || back.metadata != file.metadata) std::abort();
  for (const auto& [name, t] : back.tensors) {
    bool found = false;
    for (const auto& [name0, t0] : file.tensors) {
      if (name0 != name) continue;
      found = true;
      const size_t n = static_cast<size_t>(t.numel()) * tg::dtype_size(t.dtype());
      if (t0.shape() != t.shape() || t0.dtype() != t.dtype() ||
          (n > 0 && std::memcmp(t0.impl()->storage->data(), t.impl()->storage->data(), n) != 0)) {
        std::abort();
      }
    }
    if (!found) std::abort();
  }
  return 0;
}
