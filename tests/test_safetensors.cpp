// safetensors: a file written by the Python fixture writer (a torch state dict with PyTorch's
// key names and __metadata__) loads exactly; what we write is byte-identical to that writer's
// output for the same dict; round trips keep every dtype, shape and metadata; an untrusted
// header is checked before any allocation; load_state_dict reports every problem by name.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "io_test_util.h"

namespace tg {
namespace {

using namespace tg::testing;

GoldenCase case_named(const std::string& name) {
  for (auto& c : load_golden_cases("io")) {
    if (c.name() == name) return c;
  }
  throw Error("no golden case " + name);
}

// A safetensors file from a header text and data bytes (the header length is its size).
std::string st_file(const std::string& header, const std::string& data = "") {
  std::string s;
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return s + header + data;
}

TEST(Safetensors, TorchWrittenFileLoadsExactly) {
  const GoldenCase c = case_named("torch_state.safetensors");
  SafetensorsFile f = load_safetensors(data_path("io/torch_state.safetensors"));
  EXPECT_EQ(f.metadata, (c.json["metadata"].get<std::map<std::string, std::string>>()));
  EXPECT_EQ(f.metadata.at("note"), "unicode ok: \xc3\xa9");
  std::vector<std::string> names;
  for (const auto& [name, t] : f.tensors) names.push_back(name);
  EXPECT_EQ(names, c.json["order"].get<std::vector<std::string>>());  // the file's order
  for (const auto& [name, t] : f.tensors) {
    SCOPED_TRACE(name);
    const auto& e = c.json["entries"][name];
    EXPECT_EQ(t.shape(), e["shape"].get<Shape>());
    const std::string dt = e["dtype"];
    ASSERT_EQ(t.dtype(), dt == "F32" ? DType::Float32 : dt == "F64" ? DType::Float64 : DType::Int64);
    if (t.dtype() == DType::Int64) {
      EXPECT_EQ(t.to_vector<int64_t>(), e["values"].get<std::vector<int64_t>>());
    } else {
      EXPECT_EQ(t.to(DType::Float64).to_vector<double>(), e["values"].get<std::vector<double>>());
    }
  }
  // BatchNorm ran one forward in the fixture, so the counter is 1 rather than its default 0.
  EXPECT_EQ(f.tensors[3].first, "1.num_batches_tracked");
  EXPECT_EQ(f.tensors[3].second.item<int64_t>(), 1);
}

// The dict tools/fixtures/io.py writes to ref_written.safetensors, given here in another order.
StateDict reference_dict() {
  return {
      {"layer.weight", formula({3, 2}, DType::Float32, 0.5)},
      {"layer.bias", formula({3}, DType::Float32, 1.0)},
      {"bn.num_batches_tracked", scalar_tensor(7, DType::Int64)},
      {"bn.running_var", formula({3}, DType::Float64, 0.125)},
      {"empty", zeros({0, 2}, DType::Float32)},
  };
}

TEST(Safetensors, WritesTheSameBytesAsThePythonWriter) {
  const std::string expected = read_bytes(data_path("io/ref_written.safetensors"));
  ASSERT_FALSE(expected.empty());
  const SafetensorsMetadata meta = {{"format", "pt"}, {"epoch", "3"}};
  const std::string ours = serialize_safetensors(reference_dict(), meta);
  EXPECT_EQ(ours.size() % 8, expected.size() % 8);
  EXPECT_EQ(ours, expected) << "our header: " << ours.substr(8, 400);
  const std::string dir = fresh_temp_dir("st_bytes");
  save_safetensors(dir + "/w.safetensors", reference_dict(), meta);
  EXPECT_EQ(read_bytes(dir + "/w.safetensors"), expected);
  std::filesystem::remove_all(dir);
}

TEST(Safetensors, RoundTripKeepsDtypesShapesAndMetadata) {
  const std::string dir = fresh_temp_dir("st_roundtrip");
  manual_seed(11);
  Tensor strided = randn({4, 6}, DType::Float64).transpose(0, 1).slice(0, 0, 6, 2);  // non-contiguous
  StateDict sd = {
      {"encoder.layers.0.self_attn.in_proj_weight", randn({6, 2}, DType::Float32)},
      {"b.strided", strided},
      {"a.steps", randint(-5, 5, {3, 1})},
      {"scalar", scalar_tensor(0.5, DType::Float32)},
      {"empty", zeros({0}, DType::Float64)},
  };
  const SafetensorsMetadata meta = {{"format", "pt"}, {"quote\"and\\slash", "line\nbreak"}, {"", "empty key"}};
  save_safetensors(dir + "/rt.safetensors", sd, meta);
  SafetensorsFile back = load_safetensors(dir + "/rt.safetensors");
  EXPECT_EQ(back.metadata, meta);
  ASSERT_EQ(back.tensors.size(), sd.size());
  // Written in sorted-name order, so read back in that order.
  EXPECT_EQ(back.tensors[0].first, "a.steps");
  EXPECT_EQ(back.tensors[4].first, "scalar");
  for (const auto& entry : sd) {
    const std::string& name = entry.first;
    const Tensor& t = entry.second;
    auto it = std::find_if(back.tensors.begin(), back.tensors.end(), [&](auto& p) { return p.first == name; });
    ASSERT_NE(it, back.tensors.end()) << name;
    expect_identical(it->second, t, name);
  }
  // No metadata: no __metadata__ entry at all, and an empty map on reading.
  save_safetensors(dir + "/plain.safetensors", {{"x", ones({2})}});
  EXPECT_EQ(read_bytes(dir + "/plain.safetensors").find("__metadata__"), std::string::npos);
  EXPECT_TRUE(load_safetensors(dir + "/plain.safetensors").metadata.empty());
  std::filesystem::remove_all(dir);
}

TEST(Safetensors, WriterRejectsBadNames) {
  expect_error_with([] { serialize_safetensors({{"w", ones({1})}, {"w", ones({2})}}); }, {"duplicate tensor name \"w\""});
  expect_error_with([] { serialize_safetensors({{"", ones({1})}}); }, {"must not be empty"});
  expect_error_with([] { serialize_safetensors({{"__metadata__", ones({1})}}); }, {"reserved"});
  expect_error_with([] { serialize_safetensors({{"w", Tensor()}}); }, {"\"w\" is undefined"});
  expect_error_with([] { serialize_safetensors({{"bad\xff", ones({1})}}); }, {"not valid UTF-8"});
  expect_error_with([] { serialize_safetensors({{"m", ones(Shape(65, 1))}}); }, {"\"m\" has 65 dims", "at most 64"});
  EXPECT_EQ(parse_safetensors(serialize_safetensors({{"m", ones(Shape(64, 1))}}), "64 dims").tensors.at(0).second.dim(),
            64);
}

TEST(Safetensors, UntrustedHeadersAreCheckedBeforeAllocation) {
  const std::string d24(24, '\x01');
  auto bad = [](const std::string& bytes, const std::vector<std::string>& pieces) {
    expect_error_with([&] { parse_safetensors(bytes, "forged"); }, pieces);
  };
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(parse_safetensors(st_file(ok, d24)).tensors.at(0).second.numel(), 6);

  bad("1234", {"too short"});
  bad(st_file(ok, d24).substr(0, 30), {"runs past the end of the file"});
  {
    std::string huge = st_file(ok, d24);
    huge[5] = 1;  // header length ~ 2^40
    bad(huge, {"exceeds the 100000000-byte limit"});
  }
  bad(st_file("{\"w\":", d24), {"not valid JSON"});
  bad(st_file("[1,2,3]"), {"must be a JSON object, got array"});
  bad(st_file(R"({"__metadata__":{"k":3}})"), {"__metadata__[\"k\"] must be a string"});
  bad(st_file(R"({"__metadata__":[]})"), {"__metadata__ must be an object"});
  bad(st_file(R"({"w":5})"), {"tensor \"w\"", "expected an object"});
  bad(st_file(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", d24), {"\"dtype\""});
  bad(st_file(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", d24), {"unsupported dtype \"U8\""});
  bad(st_file(R"({"w":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", d24), {"unsupported dtype \"F8_E4M3\""});
  bad(st_file(R"({"w":{"dtype":"F32","shape":[-2,3],"data_offsets":[0,24]}})", d24), {"invalid dimension -2"});
  bad(st_file(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,24]}})", d24), {"invalid dimension 2.5"});
  bad(st_file(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0]}})", d24), {"[begin, end]"});
  // Absurd shapes fail on size, before Tensor::empty could try to allocate them.
  bad(st_file(R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,24]}})", d24),
      {"larger than the file's 24 bytes of data"});
  bad(st_file(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,28]}})", d24), {"fall outside the data section"});
  bad(st_file(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[24,0]}})", d24), {"fall outside the data section"});
  bad(st_file(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[-4,20]}})", d24), {"non-negative integers"});
  bad(st_file(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,24]}})", d24),
      {"span 24 bytes", "shape [2, 2] of F32 needs 16"});
  bad(st_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
              R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", d24),
      {"\"a\" [0, 16) and \"b\" [8, 24) overlap"});
  bad(st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
              R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", d24),
      {"key \"a\" appears more than once"});
  // Truncated data: the last tensor's end lies past what is left of the file.
  bad(st_file(ok, d24.substr(0, 20)), {"fall outside the data section of 20 bytes"});
  // The tensors must lie back to back and fill the data section, as the Rust reader requires: a
  // gap, trailing bytes, or an empty tensor placed inside another's bytes mean the header does
  // not describe the file. So must the header: a NUL byte ended the JSON parser's input early.
  bad(st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})", d24),
      {"tensor \"b\" begins at byte 16", "expected 8 (where \"a\" ends)", "back to back"});
  bad(st_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", d24),
      {"tensor \"a\" begins at byte 8", "expected 0 (its start)"});
  bad(st_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", d24),
      {"the tensors end at byte 16", "holds 24 bytes after the header"});
  bad(st_file(ok, d24 + "x"), {"the tensors end at byte 24", "holds 25 bytes"});
  bad(st_file("{}", "x"), {"the tensors end at byte 0", "holds 1 bytes"});
  bad(st_file(R"({"e":{"dtype":"F64","shape":[0,5],"data_offsets":[8,8]},)"
              R"("w":{"dtype":"I64","shape":[3],"data_offsets":[0,24]}})", d24),
      {"tensor \"e\" begins at byte 8", "expected 24"});
  bad(st_file(ok + std::string(6, '\0'), d24), {"header holds a NUL byte at byte 57 of its 63"});
  bad(st_file(ok + std::string(1, '\0') + "garbage", d24), {"NUL byte"});
  // Empty tensors own no bytes: they may sit at either end of another tensor.
  SafetensorsFile f = parse_safetensors(st_file(R"({"e":{"dtype":"F64","shape":[0,5],"data_offsets":[24,24]},)"
                                                R"("w":{"dtype":"I64","shape":[3],"data_offsets":[0,24]}})",
                                                d24));
  EXPECT_EQ(f.tensors.at(0).second.shape(), (Shape{0, 5}));
  EXPECT_EQ(f.tensors.at(1).second.to_vector<int64_t>(), std::vector<int64_t>(3, 0x0101010101010101LL));
  expect_error_with([] { load_safetensors("/nonexistent/x.safetensors"); }, {"cannot open", "/nonexistent/x.safetensors"});
}

// An empty tensor holds no bytes whatever its other dims: [1, 0] in a file with no data section
// at all is valid. (A fuzzer found the writer's file for a lone [1, 0] tensor refused by the
// reader: its dims had been checked against the data size before the zero was seen.)
TEST(Safetensors, EmptyTensorsLoadWhateverTheirOtherDims) {
  const SafetensorsFile f = parse_safetensors(st_file(R"({"e":{"dtype":"F32","shape":[1,0],"data_offsets":[0,0]},)"
                                                      R"("g":{"dtype":"F64","shape":[1000000,7,0],"data_offsets":[0,0]}})"));
  EXPECT_EQ(f.tensors.at(0).second.shape(), (Shape{1, 0}));
  EXPECT_EQ(f.tensors.at(1).second.shape(), (Shape{1000000, 7, 0}));
  const StateDict sd = {{"a", zeros({5, 0})}, {"b", zeros({0})}, {"c", zeros({300, 0, 2}, DType::BFloat16)}};
  const SafetensorsFile back = parse_safetensors(serialize_safetensors(sd), "round trip");
  ASSERT_EQ(back.tensors.size(), sd.size());
  for (size_t i = 0; i < sd.size(); ++i) {
    EXPECT_EQ(back.tensors[i].first, sd[i].first);
    EXPECT_EQ(back.tensors[i].second.shape(), sd[i].second.shape()) << sd[i].first;
    EXPECT_EQ(back.tensors[i].second.dtype(), sd[i].second.dtype()) << sd[i].first;
  }
}

// What no safetensors header holds is refused while parsing: deep nesting (which cost gigabytes
// of JSON nodes and a recursive dump()), huge arrays, dims whose product overflows strides even
// when a zero dim makes the tensor empty, and a folder given as the file.
TEST(Safetensors, HostileHeaderStructureIsRefused) {
  auto bad = [](const std::string& bytes, const std::vector<std::string>& pieces) {
    expect_error_with([&] { parse_safetensors(bytes, "forged"); }, pieces);
  };
  const std::string deep = std::string(1 << 20, '[') + std::string(1 << 20, ']');
  bad(st_file(R"({"w":)" + deep + "}"), {"forged", "nests deeper than 3 levels"});
  bad(st_file(deep), {"nests deeper than 3 levels"});
  bad(st_file(R"({"w":{"dtype":"F32","shape":[[2]],"data_offsets":[0,8]}})"), {"nests deeper"});
  bad(st_file(R"({"__metadata__":{"k":[["x"]]}})"), {"nests deeper"});
  std::string long_shape = "[1";
  for (int i = 0; i < 100000; ++i) long_shape += ",1";
  bad(st_file(R"({"w":{"dtype":"F32","shape":)" + long_shape + R"(],"data_offsets":[0,4]}})", std::string(4, '\0')),
      {"array longer than 64 elements"});
  bad(st_file(R"({"w":{"dtype":"F32","shape":[0,2305843009213693952,2305843009213693952],"data_offsets":[0,0]}})"),
      {"tensor \"w\"", "shape", "fit in int64"});
  // 64 dims of 1 are fine: the limits cut only what no real file holds.
  std::string shape64 = "[1";
  for (int i = 1; i < 64; ++i) shape64 += ",1";
  EXPECT_EQ(parse_safetensors(st_file(R"({"w":{"dtype":"F32","shape":)" + shape64 + R"(],"data_offsets":[0,4]}})",
                                      std::string(4, '\0')))
                .tensors.at(0).second.dim(),
            64);
  const std::string dir = fresh_temp_dir("st_folder");
  expect_error_with([&] { load_safetensors(dir); }, {"is not a regular file"});
  std::filesystem::remove_all(dir);
}

// A writer killed mid-write leaves "<target>.tmp.<pid>"; the next write of that target removes
// the temporaries of dead pids and keeps those of live ones (and anything else).
TEST(Safetensors, SaveRemovesStaleTemporariesOfDeadWriters) {
  const std::string dir = fresh_temp_dir("st_stale_tmp");
  const std::string target = dir + "/x.safetensors";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);  // reaped: no process has this pid now
  const pid_t live = ::getppid();
  const std::string stale = target + ".tmp." + std::to_string(child);
  const std::string alive = target + ".tmp." + std::to_string(live);
  const std::string other_target = dir + "/y.safetensors.tmp." + std::to_string(child);
  const std::string not_a_pid = target + ".tmp.12ab";
  for (const auto& p : {stale, alive, other_target, not_a_pid}) write_bytes(p, std::string(64, 'x'));
  save_safetensors(target, {{"w", ones({2})}});
  EXPECT_FALSE(std::filesystem::exists(stale)) << "a dead writer's temporary stays";
  EXPECT_TRUE(std::filesystem::exists(alive)) << "a live writer's temporary was removed";
  EXPECT_TRUE(std::filesystem::exists(other_target)) << "another target's temporary was removed";
  EXPECT_TRUE(std::filesystem::exists(not_a_pid));
  EXPECT_EQ(load_safetensors(target).tensors.at(0).second.to_vector<float>(), (std::vector<float>{1, 1}));
  // Our own in-flight temporary is never left behind either: only the files above remain.
  int files = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 4);
  std::filesystem::remove_all(dir);
}

// The tensors come in the file's order, and a header of many entries costs n log n: 100,000
// empty tensors, listed in reverse name order (an insertion-ordered JSON object searched its
// entries on every insert: a minute for 200,000).
TEST(Safetensors, ManyTensorsLoadInTheFilesOrder) {
  const int n = 100000;
  std::string header = "{";
  for (int i = n - 1; i >= 0; --i)
    header += "\"t" + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}" +
              (i > 0 ? "," : "}");
  std::string bytes(8, '\0');
  for (int k = 0; k < 8; ++k) bytes[k] = static_cast<char>((uint64_t(header.size()) >> (8 * k)) & 0xff);
  const SafetensorsFile f = parse_safetensors(bytes + header, "many");
  ASSERT_EQ(f.tensors.size(), size_t(n));
  EXPECT_EQ(f.tensors.front().first, "t" + std::to_string(n - 1));
  EXPECT_EQ(f.tensors[1].first, "t" + std::to_string(n - 2));
  EXPECT_EQ(f.tensors.back().first, "t0");
  // Written back in name order, with __metadata__ first, as the Python writer does.
  const std::string out = serialize_safetensors({{"b", ones({1})}, {"a", zeros({2})}}, {{"k", "v"}});
  EXPECT_EQ(out.substr(8, out.find('}', 8) - 8 + 1), "{\"__metadata__\":{\"k\":\"v\"}");
  const SafetensorsFile back = parse_safetensors(out, "written");
  EXPECT_EQ(back.tensors.at(0).first, "a");
  EXPECT_EQ(back.metadata.at("k"), "v");
}

// A module-like state dict: tensors the "model" owns and keeps using after the load.
StateDict model_state() {
  return {
      {"0.weight", zeros({4, 3})},
      {"0.bias", zeros({4})},
      {"1.running_mean", zeros({4})},
      {"1.num_batches_tracked", scalar_tensor(0, DType::Int64)},
  };
}

TEST(Safetensors, LoadStateDictCopiesInPlace) {
  StateDict target = model_state();
  Tensor weight = target[0].second;  // the model's handle: must see the new values
  weight.requires_grad_(true);
  StateDict source = {
      {"0.weight", formula({4, 3}, DType::Float32, 0.5)},
      {"0.bias", formula({4}, DType::Float32, 1.0)},
      {"1.running_mean", formula({4}, DType::Float32, 2.0)},
      {"1.num_batches_tracked", scalar_tensor(12, DType::Int64)},
  };
  LoadStateDictReport r = load_state_dict(target, source);
  EXPECT_TRUE(r.ok()) << r.to_string();
  EXPECT_EQ(weight.to_vector<float>(), formula({4, 3}, DType::Float32, 0.5).to_vector<float>());
  EXPECT_TRUE(weight.is_leaf());  // the load recorded nothing on the tape
  EXPECT_TRUE(weight.requires_grad());
  EXPECT_EQ(target[3].second.item<int64_t>(), 12);
  // The source is copied, not aliased: changing it later leaves the model alone.
  source[1].second.fill_(99);
  EXPECT_EQ(target[1].second.to_vector<float>(), formula({4}, DType::Float32, 1.0).to_vector<float>());
}

// PyTorch's rule for checkpoints of before 0-d tensors: one value of shape [1] loads into a 0-d
// buffer (num_batches_tracked); two values are a wrong checkpoint, not "take the first".
TEST(Safetensors, LoadStateDictTakesAOneValueVectorIntoA0dTensor) {
  StateDict target = model_state();
  StateDict source = {{"1.num_batches_tracked", full({1}, 7, DType::Int64)}};
  const LoadStateDictReport r = load_state_dict(target, source, /*strict=*/false);
  EXPECT_TRUE(r.mismatches.empty());
  EXPECT_EQ(target[3].second.dim(), 0);
  EXPECT_EQ(target[3].second.item<int64_t>(), 7);
  source = {{"1.num_batches_tracked", full({2}, 7, DType::Int64)}};
  expect_error_with([&] { load_state_dict(target, source, /*strict=*/false); },
                    {"1.num_batches_tracked: shape [2] in the source, [] in the target"});
  source = {{"1.num_batches_tracked", full({1, 1}, 7, DType::Int64)}};
  expect_error_with([&] { load_state_dict(target, source, /*strict=*/false); }, {"shape [1, 1] in the source"});
  EXPECT_EQ(target[3].second.item<int64_t>(), 7);
}

TEST(Safetensors, LoadStateDictReportsEveryProblemByName) {
  StateDict source = {
      {"0.weight", ones({3, 4})},                       // transposed shape
      {"0.bias", ones({4}, DType::Int64)},              // integer into floating
      {"1.running_mean", ones({4})},                    // fine
      {"2.weight", ones({1})},                          // unexpected
  };                                                    // 1.num_batches_tracked: missing
  StateDict target = model_state();
  try {
    load_state_dict(target, source, /*strict=*/true);
    ADD_FAILURE() << "expected a tg::Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    for (const char* piece : {"missing key: 1.num_batches_tracked", "unexpected key: 2.weight",
                              "0.weight: shape [3, 4] in the source, [4, 3] in the target",
                              "0.bias: dtype int64 in the source, float32 in the target", "nothing was copied"}) {
      EXPECT_NE(m.find(piece), std::string::npos) << piece << "\nmessage: " << m;
    }
  }
  // Nothing was copied, not even the matching tensor.
  EXPECT_EQ(target[2].second.to_vector<float>(), std::vector<float>(4, 0.0f));

  // Non-strict still refuses shape and dtype mismatches (as PyTorch does)...
  expect_error_with([&] { load_state_dict(target, source, /*strict=*/false); }, {"0.weight: shape"});
  // ...but tolerates missing and unexpected keys, copies what matches and reports the rest.
  StateDict partial = {{"1.running_mean", full({4}, 2.5)}, {"extra", ones({1})}};
  LoadStateDictReport r = load_state_dict(target, partial, /*strict=*/false);
  EXPECT_EQ(r.missing_keys, (std::vector<std::string>{"0.weight", "0.bias", "1.num_batches_tracked"}));
  EXPECT_EQ(r.unexpected_keys, (std::vector<std::string>{"extra"}));
  EXPECT_TRUE(r.mismatches.empty());
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(target[2].second.to_vector<float>(), std::vector<float>(4, 2.5f));
  expect_error_with([&] { load_state_dict(target, partial, /*strict=*/true); }, {"missing key: 0.weight"});
}

TEST(Safetensors, LoadsTheTorchCheckpointIntoAModelsState) {
  const GoldenCase c = case_named("torch_state.safetensors");
  StateDict target;
  for (const auto& name : c.json["order"].get<std::vector<std::string>>()) {
    const auto& e = c.json["entries"][name];
    const std::string dt = e["dtype"];
    target.emplace_back(name, zeros(e["shape"].get<Shape>(), dt == "F32" ? DType::Float32
                                                               : dt == "F64" ? DType::Float64 : DType::Int64));
  }
  std::reverse(target.begin(), target.end());  // order does not matter, names do
  LoadStateDictReport r = load_state_dict_from_file(target, data_path("io/torch_state.safetensors"));
  EXPECT_TRUE(r.ok());
  for (const auto& [name, t] : target) {
    if (t.dtype() == DType::Int64) continue;
    EXPECT_EQ(t.to(DType::Float64).to_vector<double>(), c.json["entries"][name]["values"].get<std::vector<double>>())
        << name;
  }
}

}  // namespace
}  // namespace tg

namespace tg {
namespace {

TEST(Safetensors, RandomCorruptionsLoadOrThrowTgError) {
  using namespace tg::testing;
  // In memory (parse_safetensors is what load_safetensors runs on the file's bytes): fast
  // enough for many variants.
  int loaded = 0, rejected = 0;
  expect_only_tg_errors(corruptions_of(read_bytes(data_path("io/torch_state.safetensors")), 7, 3000), "",
                        [](const std::string& bytes) { parse_safetensors(bytes, "fuzz"); }, &loaded, &rejected);
  EXPECT_GT(rejected, 600);
  EXPECT_GT(loaded, 200);
}

}  // namespace
}  // namespace tg
