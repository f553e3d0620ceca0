// Checks of an example's output path, made before any work: a path that cannot be written is
// reported before minutes of training rather than after them, and a path that names one of the
// program's inputs is refused (`train_mlp --csv D/train-labels-idx1-ubyte.gz` replaced the
// label file with a CSV log, and `train_stn --sheet D/t10k-labels-idx1-ubyte.gz` with a PNG).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include <tapegrad/tapegrad.h>

namespace tg::examples {

// The four Fashion-MNIST files a classifier example reads from data_dir.
inline std::vector<std::string> fashion_mnist_inputs(const std::string& data_dir) {
  std::vector<std::string> paths;
  for (const char* split : {"train", "test"}) {
    const data::FashionMnistFiles files = data::fashion_mnist_files(split, data_dir);
    paths.push_back(files.images);
    paths.push_back(files.labels);
  }
  return paths;
}

// Throws tg::Error when `path` (the value of `flag`) is the same file as one of `inputs`:
// std::filesystem::equivalent, so a symbolic link, a hard link or another spelling of the path
// is caught too. An output that does not exist yet is no input.
inline void refuse_output_onto_inputs(const std::string& flag, const std::string& path,
                                      const std::vector<std::string>& inputs) {
  for (const std::string& input : inputs) {
    std::error_code ec;  // a missing input, or a missing output: not the same file
    if (!std::filesystem::equivalent(path, input, ec)) continue;
    TG_ERROR(flag, ": ", path, " is one of the input files", path == input ? "" : " (" + input + ")",
             "; writing it would destroy the data, choose another output path");
  }
}

// Throws tg::Error when `path` (the value of `flag`) cannot be written: it is a folder, or its
// folder is missing, not a folder or not writable. (A full disk shows only when writing.)
inline void check_output_writable(const std::string& flag, const std::string& path) {
  namespace fs = std::filesystem;
  TG_CHECK(!path.empty(), flag, ": expected a file path, got an empty one");
  std::error_code ec;
  TG_CHECK(!fs::is_directory(path, ec), flag, ": ", path, " is a folder, expected a file path");
  const fs::path parent = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
  const fs::file_status st = fs::status(parent, ec);
  TG_CHECK(fs::exists(st), flag, ": cannot write ", path, ": the folder ", parent.string(), " does not exist");
  TG_CHECK(fs::is_directory(st), flag, ": cannot write ", path, ": ", parent.string(), " is not a folder");
  TG_CHECK(::access(parent.c_str(), W_OK) == 0, flag, ": cannot write ", path, ": the folder ", parent.string(),
           " is not writable");
}

// Both checks, for an output the program writes at the end (or along the way).
inline void check_output_path(const std::string& flag, const std::string& path,
                              const std::vector<std::string>& inputs = {}) {
  check_output_writable(flag, path);
  refuse_output_onto_inputs(flag, path, inputs);
}

}  // namespace tg::examples
