#include "rn50/precision.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "core/check.h"

namespace rn50 {

const std::vector<Precision>& all_precisions() {
  static const std::vector<Precision> all{Precision::fp32, Precision::tf32, Precision::amp_fp16,
                                          Precision::amp_bf16, Precision::pure_fp16};
  return all;
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::tf32: return "tf32";
    case Precision::amp_fp16: return "amp_fp16";
    case Precision::amp_bf16: return "amp_bf16";
    case Precision::pure_fp16: return "pure_fp16";
  }
  return "?";
}

Precision parse_precision(const std::string& name, const std::string& flag) {
  std::string n = name;
  for (char& c : n)
    c = c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::vector<std::string> names;
  for (Precision p : all_precisions()) {
    if (n == precision_name(p)) return p;
    names.push_back(precision_name(p));
  }
  RN50_FAIL("{} '{}': expected one of {} (or with '-' for '_')", flag, name,
            fmt::join(names, ", "));
}

DType compute_dtype(Precision p) {
  switch (p) {
    case Precision::fp32:
    case Precision::tf32: return DType::f32;
    case Precision::amp_fp16:
    case Precision::pure_fp16: return DType::f16;
    case Precision::amp_bf16: return DType::bf16;
  }
  return DType::f32;
}

bool loss_scaling(Precision p) { return compute_dtype(p) == DType::f16; }

const char* engine_precision(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::tf32: return "tf32";
    case Precision::amp_fp16:
    case Precision::pure_fp16: return "fp16";
    case Precision::amp_bf16: return "bf16";
  }
  return "fp32";
}

std::string describe_precision(Precision p, double loss_scale, bool dynamic_loss_scaling) {
  switch (p) {
    case Precision::fp32:
    case Precision::tf32: return precision_name(p);
    case Precision::amp_bf16: return "amp bf16";
    case Precision::amp_fp16:
    case Precision::pure_fp16:
      return fmt::format("{} fp16, loss scale {:g} {}", p == Precision::amp_fp16 ? "amp" : "pure",
                         loss_scale, dynamic_loss_scaling ? "dynamic" : "static");
  }
  return "?";
}

}  // namespace rn50
