// 2:4 sparse training (--asp --prune-model --mask-algo, src/train/session.cpp setup_sparsity and
// SgdOptimizer's masks):
//  * the optimiser's per-parameter masks round-trip through state_dict() under "asp_mask." keys
//    in torchvision's layout, and masked weights and momentum are exactly zero after steps
//    (every CPU backend, whatever its weight layout);
//  * `rn50 train --asp --prune-model --mask-algo mask_2d_best --from-pretrained-params W` writes
//    checkpoints whose conv weights (all but the stem) are 2:4 along the input channels, with
//    the masks in the optimizer file; resuming with --asp keeps exactly those zeros; resuming
//    without --asp, or --asp with nothing to prune from, is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/safetensors.h"
#include "model/input_stage.h"
#include "model/sparsity.h"
#include "rn50/backend.h"
#include "rn50/model.h"
#include "rn50/train.h"
#include "step_test_util.h"
#include "test_train_util.h"
#include "train/optimizer.h"
#include "train/train_step.h"

namespace rn50 {
namespace {

using rn50_test::TempDir;
namespace fs = std::filesystem;

std::map<std::string, Tensor> as_map(const std::vector<std::pair<std::string, Tensor>>& v) {
  return std::map<std::string, Tensor>(v.begin(), v.end());
}

TEST(Asp, OptimizerMasksRoundTripAndHoldZeros) {
  for (const std::string& name : available_backends()) {
    SCOPED_TRACE(name);
    auto be = make_backend(name);
    ModelOptions mo;
    mo.num_classes = 10;
    ResNet m(*be, kNet, mo);
    m.init(2);
    SgdOptimizer opt(*be, m, {});
    std::map<std::string, Tensor> masks;
    auto sd = as_map(m.state_dict());
    for (const ParamInfo& p : m.params())
      if (asp_prunes(p)) masks[p.name] = weight_mask(sd.at(p.name), MaskAlgo::mask_1d, p.name);
    opt.set_param_masks(masks);
    InputStage in(*be, Layout::NHWC, DType::f32, 10, 2);
    TrainStep step(*be, m, in, opt, StepOptions{});
    for (uint64_t seed : {1u, 2u, 3u}) {
      const int s = in.upload(random_batch(4, 32, 10, seed));
      step.run(s, 0.1);
      in.release(s);
    }
    const auto after = as_map(m.state_dict());
    const auto osd = as_map(opt.state_dict());
    int64_t zeros = 0;
    for (const auto& [pname, mk] : masks) {
      ASSERT_TRUE(osd.count(SgdOptimizer::kMaskPrefix + pname)) << pname;
      const Tensor& saved = osd.at(SgdOptimizer::kMaskPrefix + pname);
      const Tensor& w = after.at(pname);
      const Tensor& mom = osd.at(pname);
      for (int64_t i = 0; i < mk.numel(); ++i) {
        ASSERT_EQ(saved.data_as<uint8_t>()[i], mk.data_as<uint8_t>()[i]) << pname << " " << i;
        if (mk.data_as<uint8_t>()[i]) continue;
        ++zeros;
        ASSERT_EQ(w.data_as<float>()[i], 0.f) << pname << " " << i;
        ASSERT_EQ(mom.data_as<float>()[i], 0.f) << pname << " " << i;
      }
    }
    EXPECT_GT(zeros, 0);
    EXPECT_EQ(osd.count("asp_mask.conv1.weight"), 0u) << "the stem stays dense";
    // A fresh optimiser restores the masks from the state dict.
    SgdOptimizer again(*be, m, {});
    again.load_state_dict(osd, "test");
    ASSERT_TRUE(again.mask().defined());
    EXPECT_EQ(again.param_masks().size(), masks.size());
  }
}

Config sparse_config(const fs::path& dir) {
  Config c;
  c.data = DataKind::synthetic;
  c.synthetic_samples = 16;
  c.num_classes = 4;
  c.arch = "resnet18";
  c.crop_size = 32;
  c.batch_size = 8;
  c.epochs = 1;
  c.warmup_epochs = 0;
  c.run_scope = RunScope::train_only;
  c.checkpoint_dir = (dir / "ckpt").string();
  c.asp = true;
  return c;
}

/// Checks every pruned conv weight of a checkpoint is 2:4 along the input channels and returns
/// the zero count.
int64_t check_2to4(const fs::path& model_file) {
  const SafeTensorsFile f = load_safetensors(model_file.string());
  int64_t zeros = 0, convs = 0;
  for (const auto& [name, w] : f.tensors) {
    if (w.ndim() != 4 || name == "conv1.weight") continue;
    ++convs;
    for (int64_t k = 0; k < w.n(); ++k)
      for (int64_t r = 0; r < w.h(); ++r)
        for (int64_t s = 0; s < w.w(); ++s)
          for (int64_t c0 = 0; c0 < w.c(); c0 += 4) {
            int nz = 0;
            for (int64_t c = c0; c < c0 + 4; ++c)
              nz += w.data_as<float>()[w.offset4(k, c, r, s)] != 0.f;
            EXPECT_LE(nz, 2) << name;
            zeros += 4 - nz;
          }
  }
  EXPECT_EQ(convs, 19) << "resnet18: every conv but the stem";
  return zeros;
}

TEST(Asp, PruneTrainCheckpointResume) {
  TempDir tmp("asp");
  const fs::path weights = tmp.path / "pretrained.safetensors";
  save_initial_weights(weights.string(), "resnet18", 4, 4);

  Config c = sparse_config(tmp.path);
  c.prune_model = true;
  c.mask_algo = "mask_2d_best";
  c.from_pretrained_params = weights.string();
  ASSERT_EQ(run_train(c), 0);
  const fs::path e0 = tmp.path / "ckpt" / "resnet18" / "0";
  const int64_t z0 = check_2to4(e0 / "model.safetensors");
  EXPECT_GT(z0, 0);
  const SafeTensorsFile of = load_safetensors((e0 / "optimizer.safetensors").string());
  int masks = 0;
  for (const auto& [name, t] : of.tensors) masks += name.rfind("asp_mask.", 0) == 0;
  EXPECT_EQ(masks, 19);

  // Resume with --asp: the restored masks hold the same zeros one more epoch.
  Config r = sparse_config(tmp.path);
  r.epochs = 2;
  r.from_checkpoint = (tmp.path / "ckpt" / "resnet18").string();
  ASSERT_EQ(run_train(r), 0);
  EXPECT_EQ(check_2to4(tmp.path / "ckpt" / "resnet18" / "1" / "model.safetensors"), z0);

  // Refusals: an --asp checkpoint without --asp; --asp with no masks to hold.
  Config dense = r;
  dense.asp = false;
  dense.epochs = 3;
  ::testing::internal::CaptureStderr();
  EXPECT_NE(run_train(dense), 0);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("add --asp"), std::string::npos) << err;
  Config none = sparse_config(tmp.path / "other");
  ::testing::internal::CaptureStderr();
  EXPECT_NE(run_train(none), 0);
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("add --prune-model"), std::string::npos) << err;
}

}  // namespace
}  // namespace rn50
