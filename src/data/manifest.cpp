#include "data/manifest.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/fileio.h"
#include "core/json_value.h"

namespace rn50::data {

std::vector<std::string> manifest_classes(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path here = fs::path(dir) / kManifestFile;
  const fs::path parent = fs::path(dir).parent_path() / kManifestFile;
  for (const fs::path& p : {here, parent}) {
    if (!fs::exists(p)) continue;
    nlohmann::json j;
    try {
      j = parse_json_limited(read_file(p.string()), fmt::format("'{}'", p.string()));
    } catch (const nlohmann::json::exception& e) {
      RN50_FAIL("'{}': not valid JSON ({})", p.string(), e.what());
    }
    RN50_CHECK(j.is_object() && j.contains("classes") && j["classes"].is_array(),
               "'{}': not an rn50 data manifest (no \"classes\" list)", p.string());
    return json_as<std::vector<std::string>>(j["classes"],
                                                fmt::format("'{}': \"classes\"", p.string()));
  }
  return {};
}

}  // namespace rn50::data
