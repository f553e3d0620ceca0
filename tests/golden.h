// Golden fixtures: tests/data/<topic>/cases.json lists cases written by tools/fixtures/<topic>.py
// (PyTorch), each with parameters and the .npy files of its tensors.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.h>

namespace tg::testing {

inline std::string data_path(const std::string& relative) { return std::string(TAPEGRAD_TEST_DATA) + "/" + relative; }

struct GoldenCase {
  std::string topic;
  nlohmann::json json;  // the whole case: "name", "dtype", parameters, "tensors"
  std::string name() const { return json.value("name", "?"); }
  DType dtype() const { return json.value("dtype", "float64") == "float32" ? DType::Float32 : DType::Float64; }
  bool has(const std::string& key) const { return json.contains("tensors") && json["tensors"].contains(key); }
  Tensor tensor(const std::string& key) const {
    if (!has(key)) throw Error("golden case " + name() + " has no tensor '" + key + "'");
    return load_npy(data_path(topic + "/" + json["tensors"][key].get<std::string>()));
  }
};

inline std::vector<GoldenCase> load_golden_cases(const std::string& topic) {
  std::ifstream f(data_path(topic + "/cases.json"));
  if (!f) throw Error("missing golden fixtures: " + data_path(topic + "/cases.json"));
  nlohmann::json all = nlohmann::json::parse(f);
  std::vector<GoldenCase> cases;
  for (auto& c : all) cases.push_back({topic, c});
  return cases;
}

// Fails the test (with the worst element) unless |actual - expected| <= atol + rtol * |expected|
// everywhere and the shapes match.
inline void expect_close(const Tensor& actual, const Tensor& expected, double rtol, double atol,
                         const std::string& what) {
  ASSERT_TRUE(actual.defined()) << what << ": undefined";
  ASSERT_EQ(actual.shape(), expected.shape()) << what << ": shape " << format_shape(actual.shape()) << " vs expected "
                                              << format_shape(expected.shape());
  std::vector<double> a = actual.to(DType::Float64).to_vector<double>();
  std::vector<double> e = expected.to(DType::Float64).to_vector<double>();
  double worst = 0;
  size_t at = 0;
  bool bad = false;
  for (size_t i = 0; i < a.size(); ++i) {
    double excess = std::abs(a[i] - e[i]) - (atol + rtol * std::abs(e[i]));
    bool nan_mismatch = std::isnan(a[i]) != std::isnan(e[i]);
    if (nan_mismatch || excess > worst) {
      worst = nan_mismatch ? INFINITY : excess;
      at = i;
      bad = true;
    }
  }
  EXPECT_FALSE(bad) << what << ": worst element " << at << " is " << a[at] << ", expected " << e[at] << " (rtol "
                    << rtol << ", atol " << atol << ")";
}

}  // namespace tg::testing
