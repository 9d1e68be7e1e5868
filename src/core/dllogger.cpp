#include "core/dllogger.h"

#include <fmt/format.h>

#include <cmath>
#include <ctime>

#include "core/check.h"
#include "core/json_value.h"

namespace rn50 {
namespace {

using ojson = nlohmann::ordered_json;

/// The envelope's "timestamp", "datetime" (local time, Python's str(datetime)) and
/// "elapsedtime", all strings as dllogger writes them.
ojson envelope(double unix_seconds, double elapsed_seconds) {
  const auto whole = static_cast<std::time_t>(std::floor(unix_seconds));
  const auto micros = static_cast<int>((unix_seconds - static_cast<double>(whole)) * 1e6);
  std::tm tm{};
  localtime_r(&whole, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  ojson j;
  j["timestamp"] = fmt::format("{:.6f}", unix_seconds);
  j["datetime"] = fmt::format("{}.{:06d}", buf, micros);
  j["elapsedtime"] = fmt::format("{:.6f}", elapsed_seconds);
  return j;
}

std::string dump(const ojson& j) {
  return "DLLL " + j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

}  // namespace

std::string dllogger_log_line(const ojson& rec, double unix_seconds, double elapsed_seconds) {
  RN50_CHECK(rec.is_object() && rec.contains("type") && rec["type"].is_string(),
             "dllogger: the record has no \"type\"");
  const std::string type = rec["type"];
  ojson step = ojson::array();
  if (type == "config") {
    step = "PARAMETER";
  } else if (type == "step") {
    step = ojson::array({rec.value("epoch", 0), rec.value("iteration", 0)});
  } else if (type == "epoch") {
    step = ojson::array({rec.value("epoch", 0)});
  }
  ojson data = ojson::object();
  data["rn50.record"] = type;
  for (const auto& [k, v] : rec.items()) {
    if (k == "type") continue;
    data[k == "schema_version" ? "rn50.schema_version" : k] = v;
  }
  ojson j = envelope(unix_seconds, elapsed_seconds);
  j["type"] = "LOG";
  j["step"] = step;
  j["data"] = data;
  return dump(j);
}

std::string dllogger_metadata_line(const std::string& metric, const std::string& unit,
                                   const std::string& format, double unix_seconds,
                                   double elapsed_seconds) {
  ojson j = envelope(unix_seconds, elapsed_seconds);
  j["type"] = "METADATA";
  j["metric"] = metric;
  ojson md = ojson::object();
  md["unit"] = unit.empty() ? ojson(nullptr) : ojson(unit);
  md["format"] = format;
  j["metadata"] = md;
  return dump(j);
}

nlohmann::json parse_dllogger_line(const std::string& line) {
  RN50_CHECK(line.rfind("DLLL ", 0) == 0, "not a DLLogger line (no \"DLLL \" prefix)");
  nlohmann::json j;
  try {
    j = parse_json_limited(std::string_view(line).substr(5), "DLLogger line");
  } catch (const nlohmann::json::exception& e) {
    RN50_FAIL("DLLogger line is not JSON: {}", e.what());
  }
  RN50_CHECK(j.is_object(), "DLLogger line is not a JSON object");
  return j;
}

nlohmann::json dllogger_to_record(const nlohmann::json& dlll) {
  // Any JSON may come in (a DLLogger line of another tool): check types before reading.
  if (!dlll.is_object() || !dlll.contains("type") || dlll["type"] != "LOG" ||
      !dlll.contains("data") || !dlll["data"].is_object())
    return nullptr;
  const nlohmann::json& data = dlll["data"];
  if (!data.contains("rn50.record") || !data["rn50.record"].is_string()) return nullptr;
  nlohmann::json r = nlohmann::json::object();
  r["type"] = data["rn50.record"];
  if (data.contains("rn50.schema_version")) r["schema_version"] = data["rn50.schema_version"];
  for (const auto& [k, v] : data.items())
    if (k != "rn50.record" && k != "rn50.schema_version") r[k] = v;
  return r;
}

}  // namespace rn50
