// tg::CsvLogger: header from the first record, quoting, exact numbers, whole rows, appending,
// and errors that name the file.
#include <filesystem>

#include "io_test_util.h"

namespace tg {
namespace {

using namespace tg::testing;

TEST(CsvLogger, HeaderThenOneRowPerRecord) {
  const std::string path = fresh_temp_dir("csv_basic") + "/run.csv";
  CsvLogger log(path);
  log.log({{"epoch", 1}, {"loss", 0.5}, {"split", "train"}});
  // Flushed per row: the file holds the row before the logger is gone.
  EXPECT_EQ(read_bytes(path), "epoch,loss,split\n1,0.5,train\n");
  log.log({{"epoch", int64_t{2}}, {"loss", 0.1}, {"split", std::string("test")}});
  EXPECT_EQ(read_bytes(path), "epoch,loss,split\n1,0.5,train\n2,0.1,test\n");
  EXPECT_EQ(log.rows(), 2);
}

TEST(CsvLogger, NumbersAreExact) {
  EXPECT_EQ(CsvField(0.1).text(), "0.1");  // shortest form that reads back to the same double
  EXPECT_EQ(CsvField(1.0 / 3).text(), "0.3333333333333333");
  EXPECT_EQ(std::stod(CsvField(1.0 / 3).text()), 1.0 / 3);
  EXPECT_EQ(CsvField(0.1f).text(), "0.10000000149011612");  // the float's value, exactly as a double
  EXPECT_EQ(CsvField(int64_t{-9007199254740993}).text(), "-9007199254740993");
  EXPECT_EQ(CsvField(1e300).text(), "1e+300");
  EXPECT_EQ(CsvField(std::nan("")).text(), "nan");
  EXPECT_EQ(CsvField(-std::numeric_limits<double>::infinity()).text(), "-inf");
  EXPECT_EQ(CsvField(true).text(), "1");
}

TEST(CsvLogger, QuotesOnlyWhenNeeded) {
  EXPECT_EQ(csv_quote("plain"), "plain");
  EXPECT_EQ(csv_quote(""), "");
  EXPECT_EQ(csv_quote("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_quote("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(csv_quote("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(csv_quote("cr\r"), "\"cr\r\"");
  EXPECT_EQ(csv_quote(" padded"), "\" padded\"");
  EXPECT_EQ(csv_quote("in side"), "in side");
  const std::string path = fresh_temp_dir("csv_quote") + "/q.csv";
  CsvLogger log(path);
  log.log({{"loss, mean", 1}, {"note", "a \"b\", c"}});
  EXPECT_EQ(read_bytes(path), "\"loss, mean\",note\n1,\"a \"\"b\"\", c\"\n");
}

// As Python's csv module reads them back: a lone empty field is "" (a blank line reads as no
// field, and pandas skips it); a header whose quoted name holds a line break is one record.
TEST(CsvLogger, ALoneEmptyFieldAndMultiLineNamesReadBack) {
  const std::string path = fresh_temp_dir("csv_lone_empty") + "/e.csv";
  {
    CsvLogger log(path);
    log.log({{"note", "x"}});
    log.log({{"note", ""}});
  }
  EXPECT_EQ(read_bytes(path), "note\nx\n\"\"\n");
  const std::string multi = fresh_temp_dir("csv_multiline_name") + "/m.csv";
  { CsvLogger(multi).log({{"e\nf", 1}, {"g", 2}}); }
  CsvLogger(multi, /*append=*/true).log({{"e\nf", 3}, {"g", 4}});
  EXPECT_EQ(read_bytes(multi), "\"e\nf\",g\n1,2\n3,4\n");
}

TEST(CsvLogger, ARefusedRecordWritesNothing) {
  const std::string path = fresh_temp_dir("csv_refused") + "/r.csv";
  CsvLogger log(path);
  log.log({{"a", 1}, {"b", 2}});
  const std::string before = read_bytes(path);
  expect_error_with([&] { log.log({{"b", 2}, {"a", 1}}); }, {"CsvLogger::log", path, "b,a", "a,b"});
  expect_error_with([&] { log.log({{"a", 1}}); }, {"CsvLogger::log", path, "a,b"});
  expect_error_with([&] { log.log({}); }, {"CsvLogger::log", path, "at least one column"});
  expect_error_with([&] { log.log({{"a", 1}, {"a", 2}}); }, {"CsvLogger::log", path, "\"a\" appears twice"});
  EXPECT_EQ(read_bytes(path), before);
  log.log({{"a", 3}, {"b", 4}});
  EXPECT_EQ(read_bytes(path), "a,b\n1,2\n3,4\n");
  EXPECT_EQ(log.rows(), 2);
}

TEST(CsvLogger, AppendContinuesAFile) {
  const std::string path = fresh_temp_dir("csv_append") + "/a.csv";
  { CsvLogger(path).log({{"step", 1}, {"loss", 2.5}}); }
  {
    CsvLogger more(path, /*append=*/true);
    more.log({{"step", 2}, {"loss", 1.5}});  // no second header
    expect_error_with([&] { more.log({{"step", 3}}); }, {path, "step,loss"});
  }
  EXPECT_EQ(read_bytes(path), "step,loss\n1,2.5\n2,1.5\n");
  // Appending to a file that does not exist yet starts it with a header.
  const std::string fresh = fresh_temp_dir("csv_append_new") + "/n.csv";
  CsvLogger(fresh, true).log({{"x", 1}});
  EXPECT_EQ(read_bytes(fresh), "x\n1\n");
  // Without append the file starts over.
  CsvLogger(path).log({{"z", 0}});
  EXPECT_EQ(read_bytes(path), "z\n0\n");
}

TEST(CsvLogger, ErrorsNameTheFile) {
  const std::string missing = fresh_temp_dir("csv_missing") + "/no/such/folder/run.csv";
  expect_error_with([&] { CsvLogger log(missing); }, {"CsvLogger", "cannot open", missing});
  if (std::filesystem::exists("/dev/full")) {  // writes fail there with ENOSPC
    CsvLogger full("/dev/full");
    expect_error_with([&] { full.log({{"a", 1}}); }, {"CsvLogger", "cannot write", "/dev/full"});
  }
}

}  // namespace
}  // namespace tg
