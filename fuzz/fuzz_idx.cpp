// libFuzzer driver for the IDX reader, which reads files through zlib's gzread (raw or gzip,
// told apart by the gzip magic). Each input is tried twice from a per-process temporary file:
// as is (a raw IDX file, or a gzip file when it starts with the gzip magic) and gzip-compressed,
// so that mutations of the IDX header are also explored behind a valid gzip stream. A tg::Error
// is a correct refusal; any other exception, a crash or a sanitizer report is a finding. Seeds:
// fuzz/corpus/idx/ (raw and gzip files).
#include <unistd.h>
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <tapegrad/tapegrad.h>

namespace {

// Temporary files named by pid (libFuzzer's -jobs/-fork run several processes), removed at exit.
struct TempFiles {
  std::string raw, gz;
  TempFiles() {
    const char* dir = std::getenv("TMPDIR");
    const std::string base = std::string(dir && *dir ? dir : "/tmp") + "/tapegrad_fuzz_idx." + std::to_string(::getpid());
    raw = base + ".idx";
    gz = base + ".idx.gz";
  }
  ~TempFiles() {
    std::remove(raw.c_str());
    std::remove(gz.c_str());
  }
};

void check(const std::string& path) {
  try {
    const tg::IdxBytes idx = tg::read_idx(path);
    // A loaded file holds exactly product(dims) bytes.
    size_t n = 1;
    for (int64_t d : idx.dims) n *= static_cast<size_t>(d);
    if (idx.data.size() != n) std::abort();
  } catch (const tg::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static TempFiles files;
  if (FILE* f = std::fopen(files.raw.c_str(), "wb")) {
    if (size > 0) std::fwrite(data, 1, size, f);
    std::fclose(f);
    check(files.raw);
  }
  if (gzFile g = gzopen(files.gz.c_str(), "wb1")) {
    if (size > 0) gzwrite(g, data, static_cast<unsigned>(size));
    gzclose(g);
    check(files.gz);
  }
  return 0;
}
