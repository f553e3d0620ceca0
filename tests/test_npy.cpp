// .npy: files numpy wrote load exactly; what we write is byte-identical to numpy.save of the
// same array (so numpy reads it); every dtype round-trips; any strides are written in C order;
// corrupt files throw a clear tg::Error without crashing or allocating beyond the file.
#include <sys/resource.h>

#include <csignal>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <limits>
#include <thread>

#include "io_test_util.h"

namespace tg {
namespace {

using namespace tg::testing;

std::vector<GoldenCase> cases_of_kind(const std::string& kind) {
  std::vector<GoldenCase> out;
  for (auto& c : load_golden_cases("io")) {
    if (c.json.value("kind", "") == kind) out.push_back(c);
  }
  return out;
}

DType dtype_named(const std::string& name) {
  return name == "float32" ? DType::Float32 : name == "int64" ? DType::Int64 : DType::Float64;
}

TEST(Npy, NumpyWrittenFilesLoadExactly) {
  auto cases = cases_of_kind("npy");
  ASSERT_GE(cases.size(), 8u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name());
    Tensor t = c.tensor("array");
    EXPECT_EQ(t.shape(), c.json["shape"].get<Shape>());
    const std::string dt = c.json["dtype"];
    // Each dtype loads as itself (int32 stays int32); float32's values are exact in JSON's doubles.
    const DType want = dt == "float32" ? DType::Float32 : dt == "float64" ? DType::Float64
                       : dt == "int32"  ? DType::Int32   : DType::Int64;
    ASSERT_EQ(t.dtype(), want);
    if (want == DType::Int64 || want == DType::Int32) {
      // Compared as integers: 2^62 + 3 is not representable in a double.
      EXPECT_EQ(t.to(DType::Int64).to_vector<int64_t>(), c.json["values"].get<std::vector<int64_t>>());
    } else {
      std::vector<double> got = t.to(DType::Float64).to_vector<double>();
      EXPECT_EQ(got, c.json["values"].get<std::vector<double>>());
    }
  }
}

TEST(Npy, WrittenBytesEqualNumpySave) {
  const std::string dir = fresh_temp_dir("npy_bytes");
  auto cases = cases_of_kind("npy_ref");
  ASSERT_GE(cases.size(), 6u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name());
    const auto& f = c.json["formula"];
    Tensor t = formula(f["shape"].get<Shape>(), dtype_named(f["dtype"]), f["scale"].get<double>());
    if (c.json["transposed"].get<bool>()) t = t.transpose(0, 1);  // non-contiguous on purpose
    save_npy(dir + "/out.npy", t);
    const std::string ours = read_bytes(dir + "/out.npy");
    const std::string numpy = read_bytes(data_path("io/" + c.name()));
    ASSERT_FALSE(numpy.empty());
    EXPECT_EQ(ours, numpy) << "our header: " << ours.substr(10, ours.find('\n') - 10);
  }
  std::filesystem::remove_all(dir);
}

TEST(Npy, RoundTripsEveryDtypeAndShape) {
  const std::string dir = fresh_temp_dir("npy_roundtrip");
  manual_seed(7);
  std::vector<Tensor> tensors = {
      randn({3, 4}, DType::Float32),
      randn({2, 3, 5}, DType::Float64),
      randint(-1000000, 1000000, {7}),
      scalar_tensor(-2.5, DType::Float64),
      zeros({0, 3}, DType::Float32),
      zeros({2, 0}, DType::Int64),
      // Empty with a dim larger than the 128-byte file: holds no data, so it loads.
      zeros({1000, 0}, DType::Float32),
      zeros({3, 100000, 0}, DType::Float64),
      from_vector(std::vector<double>{std::numeric_limits<double>::infinity(), -0.0,
                                      std::numeric_limits<double>::denorm_min(), std::nan("")},
                  {4}),
      from_vector(std::vector<int64_t>{std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}, {2}),
  };
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string path = dir + "/t" + std::to_string(i) + ".npy";
    save_npy(path, tensors[i]);
    expect_identical(load_npy(path), tensors[i], "tensor " + std::to_string(i));
  }
  std::filesystem::remove_all(dir);
}

TEST(Npy, NonContiguousTensorsAreWrittenInCOrder) {
  const std::string dir = fresh_temp_dir("npy_strided");
  Tensor base = arange(0, 24, 1, DType::Int64).view({2, 3, 4});
  struct View { const char* what; Tensor t; std::vector<int64_t> expected; };
  std::vector<View> views = {
      {"transpose", base.select(0, 0).transpose(0, 1), {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}},
      {"step slice", base.slice(2, 0, 4, 2), {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22}},
      {"offset narrow", base.narrow(0, 1, 1).narrow(2, 1, 2), {13, 14, 17, 18, 21, 22}},
      {"broadcast", from_vector(std::vector<int64_t>{5, 6}, {2, 1}).expand({2, 3}), {5, 5, 5, 6, 6, 6}},
  };
  for (const auto& v : views) {
    SCOPED_TRACE(v.what);
    ASSERT_FALSE(v.t.is_contiguous());
    save_npy(dir + "/v.npy", v.t);
    Tensor back = load_npy(dir + "/v.npy");
    EXPECT_EQ(back.shape(), v.t.shape());
    EXPECT_EQ(back.to_vector<int64_t>(), v.expected);
  }
  // The float path too: a transposed float32 matrix.
  Tensor m = from_vector(std::vector<float>{1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f}, {2, 3}).transpose(0, 1);
  save_npy(dir + "/m.npy", m);
  EXPECT_EQ(load_npy(dir + "/m.npy").to_vector<float>(), (std::vector<float>{1.5f, 4.5f, 2.5f, 5.5f, 3.5f, 6.5f}));
  std::filesystem::remove_all(dir);
}

// A valid v1.0 file with the given header dict text, padded like numpy, then `data`.
std::string npy_with_header(const std::string& dict, const std::string& data) {
  std::string header = dict;
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string s = "\x93NUMPY\x01";
  s.push_back('\0');
  s.push_back(static_cast<char>(header.size() & 0xff));
  s.push_back(static_cast<char>(header.size() >> 8));
  return s + header + data;
}

TEST(Npy, CorruptFilesThrowClearErrors) {
  const std::string dir = fresh_temp_dir("npy_corrupt");
  const std::string good = read_bytes(data_path("io/np_f32.npy"));  // (2, 3) float32: 24 data bytes
  ASSERT_EQ(load_npy(data_path("io/np_f32.npy")).numel(), 6);
  auto check = [&](const std::string& name, const std::string& bytes, const std::vector<std::string>& pieces) {
    SCOPED_TRACE(name);
    write_bytes(dir + "/" + name, bytes);
    expect_error_with([&] { load_npy(dir + "/" + name); }, pieces);
  };
  check("truncated_data", good.substr(0, good.size() - 5), {"truncated", "needs 24 bytes", "has 19"});
  check("truncated_header", good.substr(0, 40), {"runs past the end of the file"});
  check("only_magic", good.substr(0, 8), {"not a .npy file"});
  check("empty", "", {"not a .npy file"});
  std::string bad_magic = good;
  bad_magic[1] = 'X';
  check("bad_magic", bad_magic, {"not a .npy file"});
  std::string bad_version = good;
  bad_version[6] = 9;
  check("bad_version", bad_version, {"unsupported format version 9.0"});
  // numpy reads versions 1.0, 2.0 and 3.0 only, and (6) is the integer 6, not a shape.
  std::string bad_minor = good;
  bad_minor[7] = 9;
  check("bad_minor", bad_minor, {"unsupported format version 1.9"});
  check("shape_without_comma", npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (6), }", std::string(24, '\0')),
        {"invalid shape (6)", "(n,)"});
  const std::string data24(24, '\0');
  check("fortran", npy_with_header("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", data24),
        {"Fortran-order"});
  check("bf16_as_void", npy_with_header("{'descr': '|V2', 'fortran_order': False, 'shape': (2, 3), }", data24),
        {"unsupported dtype '|V2'", "ml_dtypes bfloat16", "safetensors"});
  check("big_endian_half", npy_with_header("{'descr': '>f2', 'fortran_order': False, 'shape': (2, 3), }", data24),
        {"unsupported dtype '>f2'"});
  check("big_endian", npy_with_header("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", data24),
        {"unsupported dtype '>f4'"});
  check("uint8", npy_with_header("{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }", data24),
        {"unsupported dtype '|u1'"});
  check("no_descr", npy_with_header("{'fortran_order': False, 'shape': (2, 3), }", data24), {"no 'descr'"});
  check("no_shape", npy_with_header("{'descr': '<f4', 'fortran_order': False, }", data24), {"no 'shape'"});
  // Absurd shapes: no allocation is attempted (2^39 x 2^39 elements would be 2^80 bytes).
  check("huge_shape",
        npy_with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (549755813888, 549755813888), }", data24),
        {"larger than the file"});
  check("huge_dim", npy_with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999,), }", data24),
        {"invalid dimension"});
  // Too many digits for a long long: must still be a tg::Error, not std::out_of_range.
  check("overflow_dim",
        npy_with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (123456789012345678901234567890,), }", data24),
        {"invalid dimension 123456789012345678901234567890"});
  check("negative_dim", npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3), }", data24),
        {"invalid dimension -2"});
  check("garbage_dim", npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", data24),
        {"invalid shape"});
  // A v2.0 header whose 4-byte length claims 4 GB.
  std::string v2 = "\x93NUMPY\x02";
  v2 += std::string(1, '\0') + "\xff\xff\xff\xff" + std::string(40, ' ');
  check("v2_huge_header", v2, {"runs past the end of the file"});
  expect_error_with([&] { load_npy(dir + "/missing.npy"); }, {"cannot open", "missing.npy"});
  std::filesystem::remove_all(dir);
}

// A v2.0 file (4-byte header length) with the given header text as is, then `data`.
std::string npy_v2_with_header(const std::string& header, const std::string& data) {
  std::string s = "\x93NUMPY\x02";
  s.push_back('\0');
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  return s + header + data;
}

// The header parser is hand-written (std::regex recursed per character and overflowed the
// stack on a 30,000-character descr): everything numpy's dict literal allows in practice loads.
TEST(Npy, HeaderDictLiteralVariantsLoad) {
  std::string data24;
  for (int i = 0; i < 6; ++i) {
    const float v = 0.5f * static_cast<float>(i);
    data24.append(reinterpret_cast<const char*>(&v), 4);
  }
  const std::vector<float> values = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 2.5f};
  struct Case { const char* what; std::string dict; Shape shape; };
  std::vector<Case> cases = {
      {"numpy's own", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", {2, 3}},
      {"key order, no trailing comma", "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}", {2, 3}},
      {"double quotes", "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (6,)}", {6}},
      {"whitespace everywhere", " {\n\t'descr' :'<f4' ,\r\n 'fortran_order':False,'shape':( 3 , 2 , ) ,\n} ", {3, 2}},
      {"python 2 longs", "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }", {2, 3}},
      {"extra simple keys", "{'descr': '<f4', 'x': None, 'y': (1, 2), 'z': -3, 'w': 'a', 'fortran_order': False, "
                            "'shape': (1, 6, 1), 'v': True}", {1, 6, 1}},
  };
  // What follows the dict is padding: damaged padding does not make the array unreadable.
  cases.push_back({"damaged padding", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } j\x01nk", {2, 3}});
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    Tensor t = parse_npy(npy_with_header(c.dict, data24), c.what);
    EXPECT_EQ(t.shape(), c.shape);
    EXPECT_EQ(t.to_vector<float>(), values);
  }
  // Shape (): a scalar, from 4 bytes.
  Tensor s = parse_npy(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", data24.substr(4, 4)));
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item<float>(), 0.5f);
  // A header padded far beyond its text (but within numpy's bound) still loads.
  std::string padded = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" + std::string(9000, ' ') + "\n";
  EXPECT_EQ(parse_npy(npy_v2_with_header(padded, data24)).to_vector<float>(), values);
  // parse_npy and load_npy agree on a file numpy wrote.
  expect_identical(parse_npy(read_bytes(data_path("io/np_v2.npy"))), load_npy(data_path("io/np_v2.npy")), "np_v2");
}

TEST(Npy, LongAndMalformedHeadersAreRefusedWithoutCrashing) {
  const std::string dir = fresh_temp_dir("npy_long_header");
  const std::string data24(24, '\0');
  auto check = [&](const std::string& name, const std::string& bytes, const std::vector<std::string>& pieces) {
    SCOPED_TRACE(name);
    write_bytes(dir + "/" + name, bytes);
    expect_error_with([&] { load_npy(dir + "/" + name); }, pieces);
  };
  // The reported stack overflows: a valid v1 header with a 30,000-character descr, a 60 KB
  // header, a 1 MB v2 header. All exceed numpy's max_header_size and are refused by length.
  const std::string long_descr =
      npy_with_header("{'descr': '" + std::string(30000, 'f') + "', 'fortran_order': False, 'shape': (2, 3), }", data24);
  check("descr_30000", long_descr, {"descr_30000", "header of 30070 bytes exceeds the limit of 10000 bytes"});
  check("header_60k",
        npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" + std::string(60000, ' '), data24),
        {"header_60k", "header of 60086 bytes exceeds the limit of 10000"});
  check("v2_header_1mb",
        npy_v2_with_header("{'descr': '" + std::string(1 << 20, '<') + "', 'fortran_order': False, 'shape': (2, 3), }\n",
                           data24),
        {"v2_header_1mb", "header of 1048633 bytes exceeds the limit of 10000"});
  // Just over the bound, and just under it (the parser itself then reads 9,900 characters).
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  check("over_bound", npy_v2_with_header(dict + std::string(10001 - dict.size() - 1, ' ') + "\n", data24),
        {"header of 10001 bytes exceeds the limit of 10000 bytes"});
  check("descr_9900",
        npy_with_header("{'descr': '" + std::string(9900, 'f') + "', 'fortran_order': False, 'shape': (2, 3), }", data24),
        {"unsupported dtype 'ffffffff", "...' (expected <f2, <f4"});
  check("shape_9900", npy_v2_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                                             std::string(9900, '(') + "), }\n", data24),
        {"invalid shape (((("});
  // Malformed dict literals: each names what was expected and where.
  check("not_a_dict", npy_with_header("['descr', '<f4']", data24), {"expected '{' opening the header dict", "offset 0"});
  check("unclosed", npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)", data24),
        {"expected ',' or '}' after the value of 'shape'"});
  check("unterminated", npy_with_header("{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3), }", data24),
        {"expected ',' or '}' after the value of 'descr'", "found 'fortran_order"});
  check("twice", npy_with_header("{'descr': '<f4', 'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", data24),
        {"key 'descr' twice"});
  check("bad_bool", npy_with_header("{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }", data24),
        {"expected True or False for 'fortran_order'"});
  check("no_fortran", npy_with_header("{'descr': '<f4', 'shape': (2, 3), }", data24), {"no 'fortran_order'"});
  check("list_value", npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': [1]}", data24),
        {"a simple value", "for key 'x'"});
  check("control_bytes", npy_with_header("{'descr': '<f\x01\xff', 'fortran_order': False, 'shape': (2, 3), }", data24),
        {"unsupported dtype '<f\\x01\\xff'"});
  check("shape_unclosed", npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3", data24),
        {"invalid shape (2, 3"});
  // No data, but dims whose product would overflow the strides Tensor::empty computes.
  check("zero_dim_huge_extent",
        npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 549755813887, 549755813887), }", ""),
        {"load_npy", "shape", "fit in int64"});
  expect_error_with([&] { parse_npy(long_descr, "bytes of x.npy"); }, {"load_npy: bytes of x.npy: header of 30070"});
  std::filesystem::remove_all(dir);
}

// Through a symbolic link the linked file is replaced (the link stays), as np.save does, and a
// replaced file keeps its permission bits (a private checkpoint stayed private only until the
// next save: the temporary was created 0644 and renamed over it).
TEST(Npy, SaveWritesThroughLinksAndKeepsPermissions) {
  namespace fs = std::filesystem;
  const std::string dir = fresh_temp_dir("npy_link_mode");
  save_npy(dir + "/real.npy", scalar_tensor(1.0, DType::Float64));
  fs::create_symlink("real.npy", dir + "/link.npy");
  fs::create_symlink("link.npy", dir + "/link2.npy");
  save_npy(dir + "/link2.npy", scalar_tensor(2.0, DType::Float64));
  EXPECT_TRUE(fs::is_symlink(dir + "/link.npy"));
  EXPECT_TRUE(fs::is_symlink(dir + "/link2.npy"));
  EXPECT_EQ(load_npy(dir + "/real.npy").item<double>(), 2.0);
  fs::permissions(dir + "/real.npy", fs::perms::owner_read | fs::perms::owner_write);
  save_npy(dir + "/real.npy", scalar_tensor(3.0, DType::Float64));
  EXPECT_EQ(fs::status(dir + "/real.npy").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(load_npy(dir + "/link.npy").item<double>(), 3.0);
  // Threads of one process saving one path each write a temporary of their own: whole files.
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t)
    writers.emplace_back([&, t] {
      for (int k = 0; k < 20; ++k) save_npy(dir + "/shared.npy", full({5000}, t, DType::Float64));
    });
  for (auto& w : writers) w.join();
  const std::vector<double> v = load_npy(dir + "/shared.npy").to_vector<double>();
  EXPECT_EQ(std::count(v.begin(), v.end(), v[0]), 5000);
  int files = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 4) << "real.npy, link.npy, link2.npy and shared.npy, no temporary";
  fs::remove_all(dir);
}

// A header too long for any reader (25,000 dims: 75 KB, past numpy's and load_npy's 10,000
// bytes) is refused; its length was cut to 16 bits, an unreadable file.
TEST(Npy, AHeaderNoReaderTakesIsRefused) {
  const std::string dir = fresh_temp_dir("npy_long_header");
  expect_error_with([&] { save_npy(dir + "/many_dims.npy", full(Shape(25000, 1), 7.0, DType::Float32)); },
                    {"save_npy", "25000 dims", "max_header_size"});
  EXPECT_FALSE(std::filesystem::exists(dir + "/many_dims.npy"));
  const Tensor t = full(Shape(2000, 1), 7.0, DType::Float32);  // 6 KB of header: fine
  save_npy(dir + "/dims.npy", t);
  EXPECT_EQ(load_npy(dir + "/dims.npy").shape(), t.shape());
  std::filesystem::remove_all(dir);
}

TEST(Npy, SaveIsAtomicAndReportsUnwritableFolders) {
  const std::string dir = fresh_temp_dir("npy_atomic");
  save_npy(dir + "/a.npy", scalar_tensor(1.0, DType::Float64));
  save_npy(dir + "/a.npy", scalar_tensor(2.0, DType::Float64));  // replaces it whole
  EXPECT_EQ(load_npy(dir + "/a.npy").item<double>(), 2.0);
  // Only the target remains: no temporary file is left beside it.
  int files = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 1);
  EXPECT_THROW(save_npy(dir + "/no/such/folder/a.npy", scalar_tensor(1.0)), Error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tg

namespace tg {
namespace {

// A save that fails part-way (here the write hits the process's file size limit, as a full disk
// would) throws a tg::Error and leaves the previous file byte for byte, with no temporary beside
// it: the README's "a failed run never damages the previous one", for every saver (they all go
// through write_file_atomically).
TEST(Npy, ASaveThatFailsMidWriteLeavesThePreviousFileWhole) {
  const std::string dir = fresh_temp_dir("npy_failed_save");
  const std::string npy = dir + "/a.npy", st = dir + "/b.safetensors";
  save_npy(npy, arange(0, 100, 1, DType::Float32));
  save_safetensors(st, {{"w", arange(0, 100, 1, DType::Float32)}});
  const std::string npy_before = read_bytes(npy), st_before = read_bytes(st);
  const Tensor big = zeros({1 << 16});  // 256 KB: past the limit below
  struct rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  void (*saved_handler)(int) = std::signal(SIGXFSZ, SIG_IGN);  // write() then fails with EFBIG
  struct rlimit small = saved;
  small.rlim_cur = 64 * 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string npy_error, st_error;
  try {
    save_npy(npy, big);
  } catch (const Error& e) {
    npy_error = e.what();
  }
  try {
    save_safetensors(st, {{"w", big}});
  } catch (const Error& e) {
    st_error = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, saved_handler);
  EXPECT_NE(npy_error.find("cannot write " + npy), std::string::npos) << npy_error;
  EXPECT_NE(st_error.find("cannot write " + st), std::string::npos) << st_error;
  EXPECT_EQ(read_bytes(npy), npy_before);
  EXPECT_EQ(read_bytes(st), st_before);
  int files = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 2);
  std::filesystem::remove_all(dir);
}

TEST(Npy, RandomCorruptionsLoadOrThrowTgError) {
  using namespace tg::testing;
  const std::string dir = fresh_temp_dir("npy_fuzz");
  int loaded = 0, rejected = 0;
  for (const char* name : {"np_f32.npy", "np_i32.npy", "np_v2.npy"}) {
    expect_only_tg_errors(corruptions_of(read_bytes(data_path(std::string("io/") + name)), 42, 80),
                          dir + "/fuzz.npy", [](const std::string& p) { load_npy(p); }, &loaded, &rejected);
  }
  // Both outcomes occur (a flipped data byte still loads), so the loop exercised the checks.
  EXPECT_GT(rejected, 40);
  EXPECT_GT(loaded, 20);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tg
