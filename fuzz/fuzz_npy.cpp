// libFuzzer driver for the .npy reader: the input is the bytes of a .npy file, parsed in memory
// by parse_npy (load_npy runs the same reader on a file). A tg::Error is a correct refusal; any
// other exception, a crash or a sanitizer report is a finding. Seeds: fuzz/corpus/npy/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <tapegrad/tapegrad.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    tg::Tensor t = tg::parse_npy(bytes, "fuzz.npy");
    // What loaded must be self-consistent: its bytes came from the input.
    if (static_cast<size_t>(t.numel()) * tg::dtype_size(t.dtype()) > size * 2) std::abort();
  } catch (const tg::Error&) {
  }
  return 0;
}
