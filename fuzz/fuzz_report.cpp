// Fuzzes rn50 report's inputs: load_report_inputs on the input as one result file (JSON-lines
// report records or DLLogger "DLLL {...}" lines).
#include "fuzz_util.h"
#include "rn50/report.h"

namespace rn50::fuzz {

void fuzz_report(const uint8_t* data, size_t size) {
  const std::string path = rn50::fuzz::write_scratch("report.jsonl", data, size);
  (void)rn50::load_report_inputs({path});
}

}  // namespace rn50::fuzz

RN50_FUZZ_MAIN(fuzz_report)
