// rn50: writes the documents generated from the code, run by the build (CMake target
// rn50_docs): docs/flags.md (every command's flags, from the flag table, config/flags.h) and
// docs/report-schema.md (every report record's fields, core/report.h). A file is rewritten only
// when its text changed. An unwritable folder is reported and skipped (exit 0): the build of a
// read-only source tree still succeeds, and tests/test_train_report.cpp compares the committed
// schema with the code.
//   rn50_gen_docs DOCS_DIR
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "config/flags.h"
#include "core/report.h"

namespace {

void write_if_changed(const std::filesystem::path& path, const std::string& text) {
  std::ifstream in(path);
  std::stringstream old;
  old << in.rdbuf();
  if (in.good() && old.str() == text) return;
  std::ofstream out(path);
  out << text;
  if (!out.good()) {
    std::fprintf(stderr, "rn50_gen_docs: cannot write %s (skipped)\n", path.string().c_str());
    return;
  }
  std::fprintf(stderr, "rn50_gen_docs: updated %s\n", path.string().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: rn50_gen_docs DOCS_DIR\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  write_if_changed(dir / "flags.md", rn50::flags_markdown());
  write_if_changed(dir / "report-schema.md",
                   rn50::report_schema_markdown(rn50::config_flag_fields()));
  return 0;
}
