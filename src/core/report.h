// rn50: the report's typed records. Every JSON line rn50 writes to a --report-file (training,
// evaluation, the training benchmark, the loader benchmark) is a ReportRecord of one of the
// types in report_schema(), the one table of record types and their fields (report.cpp). A
// record refuses a field its type does not declare and a value of the wrong JSON type, and
// checks on output that its required fields are there; every line carries "type" and
// "schema_version" first. docs/report-schema.md is generated from the table (the test
// test_train_report checks it is current and that what runs write passes check_report_line).
//
// Conventions of the fields: epochs are 0-based (the checkpoint folder names); "step" counts
// optimiser steps done; losses are label-smoothed cross-entropy; top1/top5 in percent; ips =
// images per wall-clock second; times in seconds; sizes in bytes. Numbers that are NaN or
// infinite are written as null (JSON has none), so every "number" field may be null.
#pragma once

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace rn50 {

/// Written as "schema_version" in every report line. 1: the lines rn50 wrote before records
/// were typed (no "schema_version" field); 2: report_schema() as documented in
/// docs/report-schema.md. Bump it when a field changes meaning or type or is removed.
inline constexpr int kReportSchemaVersion = 2;

/// The JSON type of a field's value: integer (a JSON integer), number (any JSON number, or null
/// for NaN/inf), string, boolean, list (a JSON array), object (a JSON object).
enum class FieldType { integer, number, string, boolean, list, object };
const char* field_type_name(FieldType t);

struct ReportField {
  std::string name;  ///< "train.loss"
  FieldType type;
  bool required = true;   ///< present in every record of its type (else: when documented)
  bool nullable = false;  ///< null allowed (always allowed for FieldType::number)
  std::string doc;        ///< meaning and unit; for optional fields, when it is written
};

struct ReportRecordType {
  std::string type;     ///< the "type" value: "config", "step", ...
  std::string written;  ///< when and by what a line of this type is written
  std::vector<ReportField> fields;
  /// The record also carries every `rn50 train` flag under its config key (config lines):
  /// those are typed by the flag table (src/config/flag_table.cpp), not here.
  bool carries_flags = false;

  /// The field named `name`, or nullptr.
  const ReportField* find(std::string_view name) const;
};

/// Every record type, in the order a training report writes them, then the benchmarks'.
const std::vector<ReportRecordType>& report_schema();

/// The record type named `type`; throws rn50::Error when there is none.
const ReportRecordType& report_record_type(std::string_view type);

/// One report line under construction. Usage:
///   ReportRecord r("epoch"); r.set("epoch", 3).set("train.loss", 1.25); writer.write(r);
class ReportRecord {
 public:
  /// Throws rn50::Error when `type` is not in report_schema().
  explicit ReportRecord(std::string_view type);

  /// Sets field `name`. Floating-point values that are NaN/inf become null. Throws rn50::Error
  /// when the record type has no such field or the value's JSON type does not match.
  template <class T>
  ReportRecord& set(std::string_view name, const T& v) {
    if constexpr (std::is_floating_point_v<T>) {
      if (!std::isfinite(v)) return set_json(name, nullptr);
    }
    return set_json(name, nlohmann::ordered_json(v));
  }
  ReportRecord& set_json(std::string_view name, nlohmann::ordered_json v);

  /// Copies every key of `flags` (an object: config_to_json's output) into the record: keys the
  /// record type declares are checked as set() does, the others are taken as flag values.
  /// Throws rn50::Error when the record type does not carry flags.
  ReportRecord& set_flags(const nlohmann::ordered_json& flags);

  const ReportRecordType& spec() const { return *spec_; }

  /// The line: "type", "schema_version", then the fields in the order they were set. Throws
  /// rn50::Error naming the first required field that was not set.
  nlohmann::ordered_json to_json() const;

 private:
  const ReportRecordType* spec_;
  nlohmann::ordered_json j_;
};

/// What is wrong with `line` against the schema, one message per problem (empty: it conforms):
/// unknown type, schema_version other than kReportSchemaVersion, unknown key, wrong JSON type,
/// missing required field. For record types that carry flags, keys not in the type's own table
/// are checked against `flag_fields` when given, else accepted.
std::vector<std::string> check_report_line(const nlohmann::json& line,
                                           const std::vector<ReportField>* flag_fields = nullptr);

/// The schema as Markdown (docs/report-schema.md): a table per record type; `flag_fields` are
/// listed under the record types that carry flags.
std::string report_schema_markdown(const std::vector<ReportField>& flag_fields);

/// The report file: one JSON object per line, flushed after each, so a crashed or running job
/// leaves a readable log.
class ReportWriter {
 public:
  enum class Mode { truncate, append };
  /// rn50: one record JSON per line (report_schema()); dllogger: DLLogger's "DLLL {...}" lines
  /// (core/dllogger.h), METADATA lines for the main metrics first, then one LOG line per record.
  enum class Format { rn50, dllogger };
  /// Empty path: every write is a no-op. Otherwise creates `path` (and its parent directories),
  /// truncating it or appending to it; throws rn50::Error naming `what` (the flag, e.g.
  /// "--report-file") and the path when it cannot be opened.
  explicit ReportWriter(const std::string& path, Mode mode = Mode::truncate,
                        std::string what = "--report-file", Format format = Format::rn50);
  ~ReportWriter();
  ReportWriter(const ReportWriter&) = delete;
  ReportWriter& operator=(const ReportWriter&) = delete;

  bool enabled() const { return f_ != nullptr; }
  /// Writes record.to_json() as one line and flushes; throws rn50::Error when the write fails.
  void write(const ReportRecord& record);

 private:
  void put(std::string line);

  std::string path_, what_;
  FILE* f_ = nullptr;
  Format format_ = Format::rn50;
  double start_unix_ = 0;  ///< wall time the writer opened (DLLogger's elapsedtime origin)
};

}  // namespace rn50
