// rn50 report --reference: published ResNet-50 v1.5 training throughput of NVIDIA
// DeepLearningExamples (DLE), copied from the READMEs at DLE commit 729963dd47e7 (2024-04-04),
// section "Training performance results" of each:
//   PyTorch/Classification/ConvNets/resnet50v1.5/README.md (pytorch-21.03 NGC container)
//   PaddlePaddle/Classification/RN50v1.5/README.md (PaddlePaddle NGC container)
//   MxNet/Classification/RN50v1.5/README.md (mxnet-22.10 on A100, mxnet-20.12 on V100)
// The PyTorch and PaddlePaddle tables do not state the batch size of the run; their READMEs'
// default is 256 per GPU (written "256*" below). MXNet's states it per table (-b).
#include "rn50/precision.h"
#include "rn50/report.h"

namespace rn50 {

ReportTable reference_table() {
  struct Row {
    const char *framework, *hardware;
    int gpus;
    Precision precision;
    const char* batch;
    double ips;
    const char* source;
  };
  static const Row rows[] = {
      {"DLE PyTorch", "DGX A100 (8x A100 80GB)", 1, Precision::tf32, "256*", 938, "pytorch-21.03"},
      {"DLE PyTorch", "DGX A100 (8x A100 80GB)", 1,
       Precision::amp_fp16, "256*", 2470, "pytorch-21.03"},
      {"DLE PyTorch", "DGX A100 (8x A100 80GB)", 8, Precision::tf32, "256*", 7248, "pytorch-21.03"},
      {"DLE PyTorch", "DGX A100 (8x A100 80GB)", 8,
       Precision::amp_fp16, "256*", 16621, "pytorch-21.03"},
      {"DLE PyTorch", "DGX-1 16GB (8x V100 16GB)", 1,
       Precision::fp32, "256*", 367, "pytorch-21.03"},
      {"DLE PyTorch", "DGX-1 16GB (8x V100 16GB)", 1,
       Precision::amp_fp16, "256*", 1200, "pytorch-21.03"},
      {"DLE PyTorch", "DGX-1 16GB (8x V100 16GB)", 8,
       Precision::fp32, "256*", 2855, "pytorch-21.03"},
      {"DLE PyTorch", "DGX-1 16GB (8x V100 16GB)", 8,
       Precision::amp_fp16, "256*", 8322, "pytorch-21.03"},
      {"DLE PaddlePaddle", "DGX A100 (8x A100 80GB)", 1,
       Precision::tf32, "256*", 1024, "Paddle NGC"},
      {"DLE PaddlePaddle", "DGX A100 (8x A100 80GB)", 1,
       Precision::amp_fp16, "256*", 2897, "Paddle NGC"},
      {"DLE PaddlePaddle", "DGX A100 (8x A100 80GB)", 8,
       Precision::tf32, "256*", 8013, "Paddle NGC"},
      {"DLE PaddlePaddle", "DGX A100 (8x A100 80GB)", 8,
       Precision::amp_fp16, "256*", 23874, "Paddle NGC"},
      {"DLE MXNet", "DGX A100 (8x A100 80GB)", 1, Precision::tf32, "512", 1055.78, "mxnet-22.10"},
      {"DLE MXNet", "DGX A100 (8x A100 80GB)", 1,
       Precision::amp_fp16, "512", 3410.52, "mxnet-22.10"},
      {"DLE MXNet", "DGX A100 (8x A100 80GB)", 8, Precision::tf32, "512", 8247.44, "mxnet-22.10"},
      {"DLE MXNet", "DGX A100 (8x A100 80GB)", 8,
       Precision::amp_fp16, "512", 26673.72, "mxnet-22.10"},
      {"DLE MXNet", "DGX-1 (8x V100 16GB)", 1, Precision::fp32, "96", 384, "mxnet-20.12"},
      {"DLE MXNet", "DGX-1 (8x V100 16GB)", 1, Precision::amp_fp16, "192", 1376, "mxnet-20.12"},
      {"DLE MXNet", "DGX-1 (8x V100 16GB)", 8, Precision::fp32, "96", 3005, "mxnet-20.12"},
      {"DLE MXNet", "DGX-1 (8x V100 16GB)", 8, Precision::amp_fp16, "192", 10723, "mxnet-20.12"},
  };
  ReportTable t;
  t.name = "reference";
  t.title = "Published reference (NVIDIA DeepLearningExamples READMEs; other hardware)";
  t.columns = {"system", "hardware", "GPUs", "precision", "batch/GPU", "img/s", "container"};
  t.digits = {0, 0, 0, 0, 0, 0, 0};
  for (const Row& r : rows)
    t.rows.push_back(
        {r.framework, r.hardware, r.gpus, precision_name(r.precision), r.batch, r.ips, r.source});
  t.note =
      "Copied from the \"Training performance results\" tables of DLE's PyTorch, PaddlePaddle "
      "and MXNet ResNet-50 v1.5 READMEs (commit 729963dd47e7). 256* = the README's default "
      "batch per GPU; the table itself does not state it. These ran on other hardware than the "
      "rows above: compare ratios measured in one run, not these numbers.";
  return t;
}

}  // namespace rn50
