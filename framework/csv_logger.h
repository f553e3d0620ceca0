// A CSV log of a training run, one row per record (epoch, step, ...), readable by pandas or a
// spreadsheet while the run goes on:
//
//   tg::CsvLogger log("run.csv");
//   log.log({{"epoch", epoch}, {"loss", loss}, {"split", "train"}});
//
// The first record's column names are the header row. Every row is formatted whole, then
// handed to the file in one write() (no buffer in between: each row is on disk for a reader as
// soon as log returns, and a record that is refused writes nothing). Fields are quoted
// as RFC 4180 says (those holding a comma, a quote, a line break or surrounding spaces; quotes
// doubled; a record of one empty field is "", as Python's csv writes it). Column names must be
// distinct. Numbers are written exactly: integers as integers, floating values in the shortest
// form that reads back to the same double.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace tg {

// One field of a record: a number or text, already formatted.
class CsvField {
 public:
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
  CsvField(T value) : text_(format(value)) {}  // NOLINT: implicit, so records read as {{"loss", 0.5}}
  CsvField(const char* text) : text_(text) {}
  CsvField(std::string text) : text_(std::move(text)) {}
  const std::string& text() const { return text_; }

 private:
  static std::string format(double v);
  static std::string format(int64_t v);
  template <class T>
  static std::string format(T v) {
    if constexpr (std::is_floating_point_v<T>) return format(static_cast<double>(v));
    else return format(static_cast<int64_t>(v));
  }
  std::string text_;
};

using CsvRecord = std::vector<std::pair<std::string, CsvField>>;

// The CSV spelling of one field: as is, or quoted when it must be.
std::string csv_quote(const std::string& field);

class CsvLogger {
 public:
  // Creates (or truncates) path. With append, an existing non-empty file is continued instead:
  // its first record is the header, and records must have its columns. A file that cannot be
  // opened is a tg::Error naming it.
  explicit CsvLogger(std::string path, bool append = false);
  ~CsvLogger();
  CsvLogger(const CsvLogger&) = delete;
  CsvLogger& operator=(const CsvLogger&) = delete;

  // Writes one row (the header first, on the first record). A record whose columns differ from
  // the header's (names, order or count) is a tg::Error naming the file and both column lists,
  // and writes nothing. A failed write (a full disk) is a tg::Error naming the file.
  void log(const CsvRecord& record);

  const std::string& path() const { return path_; }
  int64_t rows() const { return rows_; }  // rows logged by this logger (not counting the header)

 private:
  void write(const std::string& text);

  std::string path_;
  int fd_ = -1;
  std::string header_;  // the header line, without its newline; empty until known
  int64_t rows_ = 0;
};

}  // namespace tg
