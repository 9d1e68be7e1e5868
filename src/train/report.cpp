#include "train/report.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/check.h"

namespace rn50 {

ReportWriter::ReportWriter(const std::string& path) : path_(path) {
  if (path.empty()) return;
  std::filesystem::path p(path);
  if (p.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(p.parent_path(), ec);
    RN50_CHECK(!ec, "--report-file '{}': cannot create its directory: {}", path, ec.message());
  }
  f_ = std::fopen(path.c_str(), "w");
  RN50_CHECK(f_ != nullptr, "--report-file '{}': cannot open: {}", path, std::strerror(errno));
}

ReportWriter::~ReportWriter() {
  if (f_) std::fclose(f_);
}

void ReportWriter::write(const nlohmann::ordered_json& line) {
  if (!f_) return;
  // nlohmann writes NaN/inf as null already; dump with error_handler replace for bad UTF-8.
  std::string s = line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  s.push_back('\n');
  const bool ok = std::fwrite(s.data(), 1, s.size(), f_) == s.size() && std::fflush(f_) == 0;
  RN50_CHECK(ok, "--report-file '{}': write failed: {}", path_, std::strerror(errno));
}

nlohmann::ordered_json json_number(double v) {
  if (!std::isfinite(v)) return nullptr;
  return v;
}

}  // namespace rn50
