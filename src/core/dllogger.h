// rn50: DLLogger's JSON-lines format (NVIDIA dllogger, JSONStreamBackend), which DLE's training
// scripts write and their parsing scripts read:
//   DLLL {"timestamp": "<unix seconds>", "datetime": "<YYYY-MM-DD HH:MM:SS.ffffff>",
//         "elapsedtime": "<seconds since the logger started>", "type": "LOG",
//         "step": <step>, "data": {...}}
// with "step" "PARAMETER" for the run's parameters, [epoch, iteration] for a training step,
// [epoch] for an epoch summary and [] for a final summary (DLE's PyTorch scripts), and
// "METADATA" lines ({"metric", "metadata": {"unit", "format"}}) describing metrics.
// An rn50 report record maps to one LOG line: config -> "PARAMETER", step -> [epoch,
// iteration], epoch -> [epoch], every other record -> []; "data" holds the record's fields plus
// "rn50.record" (its type) and "rn50.schema_version", so the record can be rebuilt exactly.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace rn50 {

/// The DLLL line (without the newline) of record `rec` (a report record's to_json(): "type",
/// "schema_version" and fields) at wall time `unix_seconds`, `elapsed_seconds` after the writer
/// started. Throws rn50::Error when rec has no string "type".
std::string dllogger_log_line(const nlohmann::ordered_json& rec, double unix_seconds,
                              double elapsed_seconds);

/// A DLLL METADATA line for `metric` with `unit` (may be empty) and a Python format spec.
std::string dllogger_metadata_line(const std::string& metric, const std::string& unit,
                                   const std::string& format, double unix_seconds,
                                   double elapsed_seconds);

/// Parses one line that starts with "DLLL ": returns the JSON object after the prefix. Throws
/// rn50::Error (with the parser's message) when the rest is not a JSON object.
nlohmann::json parse_dllogger_line(const std::string& line);

/// The rn50 report record a parsed DLLL LOG line carries ("rn50.record" in its data): type,
/// schema_version, then the data fields. Returns null for a line that is not LOG or has no
/// "rn50.record" (DLE's own logs; METADATA lines).
nlohmann::json dllogger_to_record(const nlohmann::json& dlll);

}  // namespace rn50
