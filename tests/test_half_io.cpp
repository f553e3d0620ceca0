// 16-bit and int32 files and modules: a bfloat16 checkpoint PyTorch wrote (with float16, int32
// and float32 beside it) loads bit for bit and is written back byte for byte; numpy's float16
// and int32 .npy files load exactly and save_npy reproduces numpy's bytes; bfloat16 has no npy
// dtype and save_npy says so; hostile files with the new dtypes throw tg::Error; Module::to
// converts floating tensors only and chains; a float32 checkpoint loads into a bfloat16
// module with PyTorch's rounding. Fixtures: tools/fixtures/half_io.py (tests/data/half_io).
#include <cstring>
#include <limits>

#include "io_test_util.h"

namespace tg {
namespace {

using namespace tg::testing;

const nlohmann::json& case_named(const std::string& name) {
  static const std::vector<GoldenCase> cases = load_golden_cases("half_io");
  for (const auto& c : cases)
    if (c.name() == name) return c.json;
  throw Error("no half_io case " + name);
}

DType st_dtype_named(const std::string& s) {
  return s == "BF16" ? DType::BFloat16 : s == "F16" ? DType::Float16 : s == "I32" ? DType::Int32
         : s == "F32" ? DType::Float32 : s == "F64" ? DType::Float64 : DType::Int64;
}

// A tensor's elements in C order as the integers cases.json lists: the bit patterns of the
// floating dtypes (uint16 for bfloat16/float16, uint32 for float32), the values of int32/int64.
std::vector<int64_t> bits_of(const Tensor& t) {
  Tensor c = t.contiguous();
  std::vector<int64_t> out(static_cast<size_t>(c.numel()));
  const char* p = static_cast<const char*>(static_cast<const void*>(c.impl()->storage->data())) +
                  c.offset() * dtype_size(c.dtype());
  for (size_t i = 0; i < out.size(); ++i) {
    switch (c.dtype()) {
      case DType::BFloat16:
      case DType::Float16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); out[i] = v; break; }
      case DType::Float32: { uint32_t v; std::memcpy(&v, p + 4 * i, 4); out[i] = v; break; }
      case DType::Int32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); out[i] = v; break; }
      default: { int64_t v; std::memcpy(&v, p + 8 * i, 8); out[i] = v; break; }
    }
  }
  return out;
}

void expect_entries(const StateDict& tensors, const nlohmann::json& entries) {
  ASSERT_EQ(tensors.size(), entries.size());
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(entries.contains(name));
    const auto& e = entries[name];
    EXPECT_EQ(t.dtype(), st_dtype_named(e["dtype"]));
    EXPECT_EQ(t.shape(), e["shape"].get<Shape>());
    EXPECT_EQ(bits_of(t), e["bits"].get<std::vector<int64_t>>());
  }
}

TEST(HalfIo, TorchBf16CheckpointLoadsBitForBit) {
  const auto& c = case_named("torch_bf16.safetensors");
  const SafetensorsFile f = load_safetensors(data_path("half_io/torch_bf16.safetensors"));
  expect_entries(f.tensors, c["entries"]);
  EXPECT_EQ(f.metadata, (SafetensorsMetadata{{"format", "pt"}}));
  // The edge values arrived as values, not only as bits: NaN, the smallest subnormal, the largest finite.
  for (const auto& [name, t] : f.tensors) {
    if (name != "edges") continue;
    const std::vector<float> v = t.to(DType::Float32).to_vector<float>();
    EXPECT_EQ(v[2], std::numeric_limits<float>::infinity());
    EXPECT_TRUE(std::isnan(v[4]));
    EXPECT_EQ(v[5], std::ldexp(1.0f, -133));
    EXPECT_EQ(v[6], 0x1.fep127f);
    EXPECT_TRUE(std::signbit(v[1]));
  }
}

TEST(HalfIo, TorchBf16CheckpointSavesAndReloadsByteForByte) {
  const std::string bytes = read_bytes(data_path("half_io/torch_bf16.safetensors"));
  const SafetensorsFile f = parse_safetensors(bytes, "torch_bf16");
  // Written back: the very bytes PyTorch's side wrote (same conventions, same bits).
  EXPECT_EQ(serialize_safetensors(f.tensors, f.metadata), bytes);
  // Through a file and back: every tensor identical.
  const std::string dir = fresh_temp_dir("half_io_st");
  save_safetensors(dir + "/again.safetensors", f.tensors, f.metadata);
  const SafetensorsFile back = load_safetensors(dir + "/again.safetensors");
  ASSERT_EQ(back.tensors.size(), f.tensors.size());
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    EXPECT_EQ(back.tensors[i].first, f.tensors[i].first);
    expect_identical(back.tensors[i].second, f.tensors[i].second, f.tensors[i].first);
  }
  EXPECT_EQ(read_bytes(dir + "/again.safetensors"), bytes);
  std::filesystem::remove_all(dir);
}

TEST(HalfIo, SafetensorsRoundTripsNewDtypesAnyStrides) {
  manual_seed(22);
  const Tensor base = randn({3, 4});
  StateDict tensors = {
      {"bf16_t", base.to(DType::BFloat16).transpose(0, 1)},  // non-contiguous: written in C order
      {"f16", base.to(DType::Float16).slice(1, 0, 4, 2)},
      {"i32", from_vector(std::vector<int32_t>{std::numeric_limits<int32_t>::min(), -1, 0,
                                               std::numeric_limits<int32_t>::max()}, {2, 2})},
      {"empty_bf16", zeros({0, 5}, DType::BFloat16)},
      {"scalar_f16", scalar_tensor(-0.0, DType::Float16)},
  };
  const SafetensorsFile back = parse_safetensors(serialize_safetensors(tensors), "round trip");
  ASSERT_EQ(back.tensors.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    bool found = false;
    for (const auto& [n, b] : back.tensors) {
      if (n != name) continue;
      found = true;
      expect_identical(b, t, name);
    }
    EXPECT_TRUE(found) << name;
  }
}

TEST(HalfIo, NumpyFloat16AndInt32LoadExactlyAndSaveAsNumpyDoes) {
  const std::string dir = fresh_temp_dir("half_io_npy");
  for (const char* name : {"np_f16.npy", "np_i32.npy"}) {
    SCOPED_TRACE(name);
    const auto& c = case_named(name);
    const Tensor t = load_npy(data_path(std::string("half_io/") + name));
    EXPECT_EQ(t.dtype(), c["dtype"] == "float16" ? DType::Float16 : DType::Int32);
    EXPECT_EQ(t.shape(), c["shape"].get<Shape>());
    EXPECT_EQ(bits_of(t), c["bits"].get<std::vector<int64_t>>());
    // save_npy writes numpy's header and bytes exactly, so numpy reads it back as float16/int32.
    save_npy(dir + "/out.npy", t);
    EXPECT_EQ(read_bytes(dir + "/out.npy"), read_bytes(data_path(std::string("half_io/") + name)));
    // A transposed view is written in C order.
    save_npy(dir + "/t.npy", t.transpose(0, 1));
    expect_identical(load_npy(dir + "/t.npy"), t.transpose(0, 1).contiguous(), "transposed");
  }
  // The float16 values themselves: inf, NaN, the smallest subnormal, the largest finite, ties.
  const std::vector<float> v = load_npy(data_path("half_io/np_f16.npy")).to(DType::Float32).to_vector<float>();
  EXPECT_EQ(v[2], std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(v[4]));
  EXPECT_EQ(v[5], std::ldexp(1.0f, -24));
  EXPECT_EQ(v[6], 65504.0f);
  EXPECT_EQ(v[7], 1.0f);                          // 1 + 2^-11 ties to even: down
  EXPECT_EQ(v[8], 1.0f + std::ldexp(1.0f, -9));   // 1 + 3 * 2^-11 ties to even: up
  std::filesystem::remove_all(dir);
}

TEST(HalfIo, NpyRefusesBfloat16AndSaysWhatToDo) {
  const std::string dir = fresh_temp_dir("half_io_bf16_npy");
  expect_error_with([&] { save_npy(dir + "/w.npy", ones({2}, DType::BFloat16)); },
                    {"save_npy", "w.npy", "numpy has no bfloat16", "save_safetensors", "Float32"});
  EXPECT_FALSE(std::filesystem::exists(dir + "/w.npy"));  // nothing half-written
  // The float32 route is exact: every bfloat16 value survives it and comes back with the same bits.
  manual_seed(3);
  const Tensor w = randn({5, 7}).to(DType::BFloat16);
  save_npy(dir + "/w32.npy", w.to(DType::Float32));
  expect_identical(load_npy(dir + "/w32.npy").to(DType::BFloat16), w, "bf16 through float32");
  std::filesystem::remove_all(dir);
}

// A v1.0 .npy file with the given header dict and data bytes (numpy's padding).
std::string npy_file(const std::string& dict, const std::string& data) {
  std::string header = dict;
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::string s = "\x93NUMPY\x01";
  s.push_back('\0');
  s.push_back(static_cast<char>(header.size() & 0xff));
  s.push_back(static_cast<char>(header.size() >> 8));
  return s + header + data;
}

// A safetensors file with the given header text and data.
std::string st_file(const std::string& header, const std::string& data) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  return s + header + data;
}

TEST(HalfIo, HostileFilesWithTheNewDtypesThrowTgError) {
  const std::string d12(12, '\0');
  // npy: sizes are counted in the dtype's own bytes (2 for <f2, 4 for <i4).
  auto npy_bad = [](const std::string& bytes, const std::vector<std::string>& pieces) {
    expect_error_with([&] { parse_npy(bytes, "hostile.npy"); }, pieces);
  };
  npy_bad(npy_file("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 4), }", d12),
          {"hostile.npy", "truncated", "needs 16 bytes", "has 12"});
  npy_bad(npy_file("{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }", d12),
          {"truncated", "needs 16 bytes", "has 12"});
  npy_bad(npy_file("{'descr': '<f2', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", d12),
          {"larger than the file"});
  npy_bad(npy_file("{'descr': '>i4', 'fortran_order': False, 'shape': (3,), }", d12), {"unsupported dtype '>i4'"});
  npy_bad(npy_file("{'descr': '<f2', 'fortran_order': True, 'shape': (2, 3), }", d12), {"Fortran-order"});
  // Exactly enough bytes loads.
  EXPECT_EQ(parse_npy(npy_file("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }", d12)).dtype(),
            DType::Float16);

  auto st_bad = [](const std::string& bytes, const std::vector<std::string>& pieces) {
    expect_error_with([&] { parse_safetensors(bytes, "hostile.st"); }, pieces);
  };
  // data_offsets must span exactly numel x 2 (BF16, F16) or x 4 (I32) bytes.
  st_bad(st_file(R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,24]}})", std::string(24, '\0')),
         {"tensor \"w\"", "span 24 bytes", "of BF16 needs 12"});
  st_bad(st_file(R"({"w":{"dtype":"F16","shape":[7],"data_offsets":[0,12]}})", d12), {"of F16 needs 14"});
  st_bad(st_file(R"({"w":{"dtype":"I32","shape":[2],"data_offsets":[0,12]}})", d12), {"of I32 needs 8"});
  st_bad(st_file(R"({"w":{"dtype":"BF16","shape":[4294967296,4294967296],"data_offsets":[0,12]}})", d12),
         {"larger than the file"});
  st_bad(st_file(R"({"w":{"dtype":"BF16","shape":[6],"data_offsets":[0,14]}})", d12), {"fall outside the data"});
  st_bad(st_file(R"({"a":{"dtype":"F16","shape":[4],"data_offsets":[0,8]},"b":{"dtype":"I32","shape":[1],"data_offsets":[6,10]}})",
                 d12),
         {"overlap"});
  st_bad(st_file(R"({"w":{"dtype":"bf16","shape":[6],"data_offsets":[0,12]}})", d12),
         {"unsupported dtype \"bf16\"", "BF16, F16 or I32"});
  // And the valid neighbour of each loads.
  const SafetensorsFile ok = parse_safetensors(
      st_file(R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"I32","shape":[2],"data_offsets":[4,12]}})",
              d12));
  EXPECT_EQ(ok.tensors[0].second.dtype(), DType::Float16);
  EXPECT_EQ(ok.tensors[1].second.dtype(), DType::Int32);
}

TEST(HalfIo, RandomCorruptionsLoadOrThrowTgError) {
  int loaded = 0, rejected = 0;
  expect_only_tg_errors(corruptions_of(read_bytes(data_path("half_io/torch_bf16.safetensors")), 22, 2000), "",
                        [](const std::string& bytes) { parse_safetensors(bytes, "fuzz"); }, &loaded, &rejected);
  for (const char* name : {"np_f16.npy", "np_i32.npy"}) {
    expect_only_tg_errors(corruptions_of(read_bytes(data_path(std::string("half_io/") + name)), 23, 300), "",
                          [](const std::string& bytes) { parse_npy(bytes, "fuzz"); }, &loaded, &rejected);
  }
  // Both outcomes occur (a flipped data byte still loads), so the loop exercised the checks.
  EXPECT_GT(rejected, 100);
  EXPECT_GT(loaded, 100);
}

// ---- modules ----

struct Counted : Module {
  std::shared_ptr<Linear> fc = add_module("fc", std::make_shared<Linear>(4, 3));
  Tensor scale = register_parameter("scale", full({3}, 1.0 / 3.0));
  Tensor running = register_buffer("running", full({3}, 0.1));
  Tensor steps = register_buffer("steps", scalar_tensor(41, DType::Int64));
  Tensor index = register_buffer("index", from_vector(std::vector<int32_t>{7, -7}, {2}));
  std::string name() const override { return "Counted"; }
};

TEST(HalfModule, ToConvertsFloatingTensorsKeepsIntegerBuffersAndChains) {
  manual_seed(5);
  Counted net;
  const StateDict before = net.state_dict();
  std::vector<Tensor> originals;
  for (const auto& e : before) originals.push_back(e.second.detach().clone());
  Tensor weight = net.fc->weight;  // a handle held outside: must see the conversion
  Module& same = net.to(DType::BFloat16);
  EXPECT_EQ(&same, &net);  // returns the module, as PyTorch's module.to(dtype)
  const StateDict after = net.state_dict();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    SCOPED_TRACE(after[i].first);
    const Tensor& t = after[i].second;
    EXPECT_EQ(t.impl(), before[i].second.impl());  // the same tensor, converted in place
    if (is_floating(originals[i].dtype())) {
      EXPECT_EQ(t.dtype(), DType::BFloat16);
      // Rounded to nearest even once, as Tensor::to (checked against PyTorch in the core's tests).
      EXPECT_EQ(bits_of(t), bits_of(originals[i].to(DType::BFloat16)));
    } else {
      EXPECT_EQ(t.dtype(), originals[i].dtype());  // counters and indices stay integers
      EXPECT_EQ(bits_of(t), bits_of(originals[i]));
    }
  }
  EXPECT_EQ(weight.dtype(), DType::BFloat16);
  EXPECT_TRUE(weight.requires_grad());
  EXPECT_TRUE(weight.is_leaf());
  // Chained: bfloat16 then float16 then float32; every step rounds what it was given.
  net.to(DType::Float16).to(DType::Float32);
  EXPECT_EQ(net.scale.dtype(), DType::Float32);
  EXPECT_EQ(net.scale.to_vector<float>()[0],
            static_cast<float>(Float16(static_cast<float>(BFloat16(1.0f / 3.0f)))));
  EXPECT_EQ(net.steps.item<int64_t>(), 41);
  expect_error_with([&] { net.to(DType::Int32); }, {"Counted.to", "floating", "int32"});
}

TEST(HalfModule, Float32CheckpointLoadsIntoBf16ModuleAsPyTorchRoundsIt) {
  // PyTorch's load_state_dict copies with conversion (param.copy_(input_param)); the fixture
  // lists the bfloat16 bits PyTorch's bf16 Linear holds after loading the float32 file.
  const auto& c = case_named("f32_linear.safetensors");
  Linear lin(4, 3);
  lin.to(DType::BFloat16);
  Tensor weight = lin.weight;
  LoadStateDictReport r = lin.load_state_dict(load_safetensors(data_path("half_io/f32_linear.safetensors")).tensors);
  EXPECT_TRUE(r.ok()) << r.to_string();
  expect_entries(lin.state_dict(), c["loaded_into_bf16"]);
  EXPECT_EQ(weight.dtype(), DType::BFloat16);  // the module's dtype stays; the values converted
  EXPECT_TRUE(weight.is_leaf());
  // Through the file helper, into float16 and float64 modules: converted the same way.
  for (DType dt : {DType::Float16, DType::Float64}) {
    Linear other(4, 3);
    other.to(dt);
    load_state_dict_from_file(other.state_dict(), data_path("half_io/f32_linear.safetensors"));
    const StateDict src = load_safetensors(data_path("half_io/f32_linear.safetensors")).tensors;
    for (const auto& [name, t] : other.state_dict()) {
      for (const auto& [n, s] : src) {
        if (n == name) {
          EXPECT_EQ(bits_of(t), bits_of(s.to(dt))) << name;
        }
      }
    }
  }
  // A bf16 checkpoint back into a float32 module is exact (every bf16 value is a float32).
  Linear wide(4, 3);
  wide.load_state_dict(lin.state_dict());
  EXPECT_EQ(bits_of(wide.weight.to(DType::BFloat16)), bits_of(lin.weight));
  // Integer into floating is refused, naming the tensor (nothing is copied).
  expect_error_with([&] { lin.load_state_dict({{"weight", zeros({3, 4}, DType::Int32)}, {"bias", zeros({3})}}); },
                    {"weight: dtype int32 in the source, bfloat16 in the target", "nothing was copied"});
}

}  // namespace
}  // namespace tg
