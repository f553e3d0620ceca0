#include "csv_logger.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>

#include "check.h"

namespace tg {

std::string CsvField::format(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest round-trip form
  return std::string(buf, r.ptr);
}

std::string CsvField::format(int64_t v) { return std::to_string(v); }

std::string csv_quote(const std::string& field) {
  const bool needs = field.find_first_of(",\"\r\n") != std::string::npos ||
                     (!field.empty() && (field.front() == ' ' || field.back() == ' '));
  if (!needs) return field;
  std::string q = "\"";
  for (char c : field) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + "\"";
}

namespace {

std::string join(const CsvRecord& record, bool names) {
  std::string line;
  for (size_t i = 0; i < record.size(); ++i) {
    if (i > 0) line += ',';
    line += csv_quote(names ? record[i].first : record[i].second.text());
  }
  // One empty field: a blank line would read back as no field at all (Python's csv.writer
  // writes "" here too).
  return record.size() == 1 && line.empty() ? "\"\"" : line;
}

// The file's first record as written, without its line break: up to the first line break
// outside quotes (a quoted column name may hold one). Empty when the file is missing or empty.
std::string read_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string header;
  bool quoted = false;
  for (char c; in.get(c);) {
    if (c == '"') quoted = !quoted;  // a doubled quote toggles twice
    if (c == '\n' && !quoted) break;
    header += c;
  }
  if (!header.empty() && header.back() == '\r') header.pop_back();
  return header;
}

}  // namespace

CsvLogger::CsvLogger(std::string path, bool append) : path_(std::move(path)) {
  if (append) header_ = read_header(path_);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
  TG_CHECK(fd_ >= 0, "CsvLogger: cannot open ", path_, " for writing: ", std::strerror(errno));
}

CsvLogger::~CsvLogger() {
  if (fd_ >= 0) ::close(fd_);
}

void CsvLogger::write(const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    TG_CHECK(n > 0, "CsvLogger: cannot write to ", path_, ": ", n < 0 ? std::strerror(errno) : "nothing written");
    done += static_cast<size_t>(n);
  }
}

void CsvLogger::log(const CsvRecord& record) {
  TG_CHECK(!record.empty(), "CsvLogger::log: ", path_, ": expected at least one column, got none");
  for (size_t i = 0; i < record.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      TG_CHECK(record[i].first != record[j].first, "CsvLogger::log: ", path_, ": column \"", record[i].first,
               "\" appears twice in the record; expected distinct names");
  const std::string names = join(record, true);
  std::string text;
  if (header_.empty()) {
    text = names + "\n";
  } else {
    TG_CHECK(names == header_, "CsvLogger::log: ", path_, ": the record's columns are ", names,
             " but the file's header is ", header_, "; expected the same columns in the same order");
  }
  text += join(record, false) + "\n";
  write(text);
  header_ = names;
  ++rows_;
}

}  // namespace tg
