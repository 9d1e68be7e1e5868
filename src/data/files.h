// rn50 data: which file names count as images (shared by the ImageFolder index and check-data).
#pragma once

#include <algorithm>
#include <cctype>
#include <string>

namespace rn50::data {

/// torchvision's has_file_allowed_extension restricted to the formats rn50 decodes:
/// name.lower().endswith((".jpg", ".jpeg", ".png")). The decoder itself picks JPEG or PNG by the
/// file's magic bytes, so a PNG named .JPEG still decodes.
inline bool is_image_file_name(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const std::string e : {".jpg", ".jpeg", ".png"}) {
    if (lower.size() >= e.size() && lower.compare(lower.size() - e.size(), e.size(), e) == 0) {
      return true;
    }
  }
  return false;
}

}  // namespace rn50::data
