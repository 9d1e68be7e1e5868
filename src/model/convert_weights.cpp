// rn50: convert-weights — runs tools/convert_weights.py (pickle-based readers of torch and Paddle
// files) and recognises those files when they are passed where safetensors is expected.
#include "model/convert_weights.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/check.h"
#include "core/subprocess.h"

#ifndef RN50_CONVERT_SCRIPT_DEFAULT
#define RN50_CONVERT_SCRIPT_DEFAULT ""
#endif

namespace rn50 {

namespace {

namespace fs = std::filesystem;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

}  // namespace

void convert_weights(const ConvertWeightsOptions& o, std::ostream& log) {
  RN50_CHECK(!o.source.empty(), "rn50 convert-weights: give the weights file to convert");
  RN50_CHECK(!o.output.empty(),
             "rn50 convert-weights: pass --output FILE.safetensors, the file to write");
  RN50_CHECK(fs::is_regular_file(o.source), "rn50 convert-weights '{}': no such file", o.source);
  const std::string python = helper_python();
  const std::string script = env_or("RN50_CONVERT_SCRIPT", RN50_CONVERT_SCRIPT_DEFAULT);
  RN50_CHECK(!script.empty() && fs::is_regular_file(script),
             "rn50 convert-weights: the converter '{}' is missing (it is tools/convert_weights.py "
             "in rn50's source tree; set RN50_CONVERT_SCRIPT to its path)",
             script);
  const std::string cmd = shell_quote(python) + " " + shell_quote(script) + " " +
                          shell_quote(o.source) + " --output " + shell_quote(o.output) +
                          " --from " + shell_quote(o.from) + " --arch " + shell_quote(o.arch) +
                          " --input-channels " + std::to_string(o.input_channels) +
                          (o.ema ? " --ema" : "");
  std::string out;
  const int rc = run_captured(cmd, out);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  if (rc == 127)
    RN50_FAIL("rn50 convert-weights: cannot run the Python interpreter '{}' (install python3 "
              "with numpy, and python3-torch for .pth files: bash scripts/setup.sh; or set "
              "RN50_PYTHON)",
              python);
  RN50_CHECK(rc == 0, "{}", out.empty() ? "rn50 convert-weights failed without a message" : out);
  log << out << "\n";
}

std::string foreign_weights_hint(const std::string& path, const std::string& flag) {
  std::ifstream f(path, std::ios::binary);
  unsigned char m[4] = {0, 0, 0, 0};
  f.read(reinterpret_cast<char*>(m), 4);
  if (f.gcount() < 2) return "";
  const bool zip = m[0] == 'P' && m[1] == 'K' && m[2] == 3 && m[3] == 4;
  const bool pickle = m[0] == 0x80 && m[1] >= 2 && m[1] <= 5;
  if (!zip && !pickle) return "";
  const std::string ext = fs::path(path).extension().string();
  const char* what = ext == ".pdparams" ? "a Paddle .pdparams file"
                     : zip              ? "a PyTorch file (torch.save)"
                                        : "a pickle file (an older torch.save, or Paddle's)";
  return fmt::format(
      "{} '{}' is {}, not safetensors: convert it once with `rn50 convert-weights {} --output "
      "{}.safetensors` (torchvision .pth, DLE PyTorch checkpoints, DLE Paddle .pdparams) and pass "
      "the .safetensors file",
      flag, path, what, path, fs::path(path).stem().string());
}

}  // namespace rn50
