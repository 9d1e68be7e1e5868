// BatchNorm folding and post-op fusion (src/infer/fold.h): the folded program, run by a naive
// float64 executor below, gives the logits of the training graph in eval mode (reference
// backend: conv, eval BatchNorm, ReLU, add, pools, fc) on random weights, random BN statistics
// and a random input; the program has the structure the engine relies on; bad weights give
// errors that name the key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "infer_test_util.h"
#include "rn50/backend.h"
#include "rn50/error.h"
#include "rn50/inference.h"
#include "rn50/model.h"

namespace rn50 {
namespace {

/// A double NCHW activation.
struct Act {
  int64_t n = 0, c = 0, h = 0, w = 0;
  std::vector<double> v;
  double& at(int64_t i, int64_t ch, int64_t y, int64_t x) {
    return v[((i * c + ch) * h + y) * w + x];
  }
  double at(int64_t i, int64_t ch, int64_t y, int64_t x) const {
    return v[((i * c + ch) * h + y) * w + x];
  }
};

/// Runs `p` on `x` (N, 3, H, W) in float64: conv (+ bias, + residual, ReLU), maxpool, global
/// average pool, fc, straight from the definitions (torch's padding and output sizes).
std::vector<double> run_naive(const InferenceProgram& p, const Act& x) {
  std::map<int, Act> vals;
  vals[0] = x;
  std::vector<double> logits;
  for (const InferOp& op : p.ops) {
    const Act& in = vals.at(op.input);
    Act o;
    o.n = in.n;
    switch (op.kind) {
      case InferOp::Kind::conv: {
        const ConvSpec& c = op.conv;
        o.c = c.out_channels;
        o.h = (in.h + 2 * c.pad - c.kernel) / c.stride + 1;
        o.w = (in.w + 2 * c.pad - c.kernel) / c.stride + 1;
        o.v.assign(static_cast<size_t>(o.n * o.c * o.h * o.w), 0.0);
        const float* wt = op.weight.data_as<const float>();
        const float* b = op.bias.data_as<const float>();
        const Act* res = op.residual >= 0 ? &vals.at(op.residual) : nullptr;
        for (int64_t i = 0; i < o.n; ++i)
          for (int64_t k = 0; k < o.c; ++k)
            for (int64_t y = 0; y < o.h; ++y)
              for (int64_t xx = 0; xx < o.w; ++xx) {
                double s = b[k];
                for (int64_t ci = 0; ci < in.c; ++ci)
                  for (int r = 0; r < c.kernel; ++r)
                    for (int q = 0; q < c.kernel; ++q) {
                      const int64_t iy = y * c.stride - c.pad + r, ix = xx * c.stride - c.pad + q;
                      if (iy < 0 || ix < 0 || iy >= in.h || ix >= in.w) continue;
                      s += double(wt[((k * in.c + ci) * c.kernel + r) * c.kernel + q]) *
                           in.at(i, ci, iy, ix);
                    }
                if (res) s += res->at(i, k, y, xx);
                if (op.relu) s = std::max(s, 0.0);
                o.at(i, k, y, xx) = s;
              }
        break;
      }
      case InferOp::Kind::maxpool: {
        const PoolSpec& pl = op.pool;
        o.c = in.c;
        o.h = (in.h + 2 * pl.pad - pl.kernel) / pl.stride + 1;
        o.w = (in.w + 2 * pl.pad - pl.kernel) / pl.stride + 1;
        o.v.assign(static_cast<size_t>(o.n * o.c * o.h * o.w), 0.0);
        for (int64_t i = 0; i < o.n; ++i)
          for (int64_t ch = 0; ch < o.c; ++ch)
            for (int64_t y = 0; y < o.h; ++y)
              for (int64_t xx = 0; xx < o.w; ++xx) {
                double m = -INFINITY;
                for (int r = 0; r < pl.kernel; ++r)
                  for (int q = 0; q < pl.kernel; ++q) {
                    const int64_t iy = y * pl.stride - pl.pad + r, ix = xx * pl.stride - pl.pad + q;
                    if (iy >= 0 && ix >= 0 && iy < in.h && ix < in.w)
                      m = std::max(m, in.at(i, ch, iy, ix));
                  }
                o.at(i, ch, y, xx) = m;
              }
        break;
      }
      case InferOp::Kind::global_avgpool: {
        o.c = in.c;
        o.h = o.w = 1;
        o.v.assign(static_cast<size_t>(o.n * o.c), 0.0);
        for (int64_t i = 0; i < o.n; ++i)
          for (int64_t ch = 0; ch < o.c; ++ch) {
            double s = 0;
            for (int64_t y = 0; y < in.h; ++y)
              for (int64_t xx = 0; xx < in.w; ++xx) s += in.at(i, ch, y, xx);
            o.at(i, ch, 0, 0) = s / double(in.h * in.w);
          }
        break;
      }
      case InferOp::Kind::fc: {
        const int64_t k = op.weight.dim(0), c = op.weight.dim(1);
        const float* wt = op.weight.data_as<const float>();
        const float* b = op.bias.data_as<const float>();
        logits.assign(static_cast<size_t>(in.n * k), 0.0);
        for (int64_t i = 0; i < in.n; ++i)
          for (int64_t j = 0; j < k; ++j) {
            double s = b[j];
            for (int64_t ch = 0; ch < c; ++ch) s += double(wt[j * c + ch]) * in.at(i, ch, 0, 0);
            logits[static_cast<size_t>(i * k + j)] = s;
          }
        o.c = k;
        o.h = o.w = 1;
        o.v = logits;
        break;
      }
    }
    vals[op.output] = std::move(o);
  }
  return logits;
}

void expect_folded_matches_eval_graph(const std::string& arch, int classes, int64_t hw) {
  auto be = make_backend("ref");
  ModelOptions opt;
  opt.num_classes = classes;
  opt.layout = Layout::NCHW;
  ResNet model(*be, arch_from_name(arch), opt);
  model.init(11);
  const auto sd = randomise_bn(model, 12);
  const int64_t n = 2;
  Act x{n, 3, hw, hw, {}};
  std::mt19937_64 gen(13);
  std::normal_distribution<float> nd;
  Tensor xh = Tensor::empty({n, 3, hw, hw}, DType::f32);
  for (int64_t i = 0; i < xh.numel(); ++i) {
    xh.data_as<float>()[i] = nd(gen);
    x.v.push_back(xh.data_as<float>()[i]);
  }
  Tensor xd = be->alloc(xh.shape(), DType::f32, Layout::NCHW);
  be->copy(xh, xd);
  const Tensor& logits = model.forward(xd, /*train=*/false);
  Tensor lh = Tensor::empty(logits.shape(), DType::f32);
  be->copy(logits, lh);
  be->synchronize();

  const InferenceProgram p = fold_network(model.desc(), sd, opt.bn_eps);
  const std::vector<double> got = run_naive(p, x);
  ASSERT_EQ(static_cast<int64_t>(got.size()), n * classes);
  double scale = 0;
  for (int64_t i = 0; i < lh.numel(); ++i)
    scale = std::max(scale, std::fabs(double(lh.data_as<float>()[i])));
  ASSERT_GT(scale, 1e-3) << "logits too small to compare";
  for (int64_t i = 0; i < lh.numel(); ++i)
    EXPECT_NEAR(got[static_cast<size_t>(i)], lh.data_as<float>()[i], 1e-4 * scale)
        << arch << " logit " << i;
}

TEST(InferFold, Resnet18FoldedEqualsConvBnGraph) {
  expect_folded_matches_eval_graph("resnet18", 7, 32);
}
TEST(InferFold, Resnet50FoldedEqualsConvBnGraph) {
  expect_folded_matches_eval_graph("resnet50", 5, 32);
}

TEST(InferFold, Resnet50ProgramStructure) {
  auto be = make_backend("ref");
  ModelOptions opt;
  opt.num_classes = 10;
  ResNet model(*be, arch_from_name("resnet50"), opt);
  model.init(1);
  std::map<std::string, Tensor> sd;
  for (auto& [k, t] : model.state_dict()) sd.emplace(k, t);
  const InferenceProgram p = fold_network(model.desc(), sd);
  int convs = 0, with_relu = 0, with_residual = 0, folded = 0;
  for (const InferOp& op : p.ops) {
    if (op.kind != InferOp::Kind::conv) continue;
    ++convs;
    with_relu += op.relu;
    with_residual += op.residual >= 0;
    folded += !op.folded_bn.empty();
    if (op.name.find("downsample") != std::string::npos) {
      EXPECT_FALSE(op.relu) << op.name;
      EXPECT_EQ(op.residual, -1) << op.name;
    }
    if (op.residual >= 0) {
      EXPECT_NE(op.name.find("conv3"), std::string::npos)
          << op.name << ": only a block's last conv adds";
      EXPECT_TRUE(op.relu) << op.name;
    }
  }
  EXPECT_EQ(convs, 53);
  EXPECT_EQ(folded, 53);
  EXPECT_EQ(with_residual, 16);
  EXPECT_EQ(with_relu, 49);      // every conv but the 4 downsample convs
  EXPECT_EQ(p.ops.size(), 56u);  // + maxpool, avgpool, fc
  EXPECT_EQ(p.ops.back().kind, InferOp::Kind::fc);
  EXPECT_EQ(p.ops.back().weight.shape(), (std::vector<int64_t>{10, 2048}));
  // The shortcut of layer1.0 (its downsample) is computed before the conv that adds it.
  const NetworkDesc& d = model.desc();
  for (size_t o = 0; o < p.ops.size(); ++o) {
    if (p.ops[o].residual > 0) {
      EXPECT_LT(p.producer[static_cast<size_t>(p.ops[o].residual)], static_cast<int>(o))
          << p.ops[o].name;
    }
  }
  EXPECT_EQ(
      p.ops[static_cast<size_t>(p.producer[static_cast<size_t>(d.layer("layer1.0.relu3"))])].name,
      "layer1.0.conv3");
}

TEST(InferFold, BadWeightsNameTheKey) {
  auto be = make_backend("ref");
  ModelOptions opt;
  opt.num_classes = 3;
  ResNet model(*be, arch_from_name("resnet18"), opt);
  model.init(1);
  std::map<std::string, Tensor> sd;
  for (auto& [k, t] : model.state_dict()) sd.emplace(k, t);
  auto message = [&](const std::map<std::string, Tensor>& m) {
    return error_of([&] { fold_network(model.desc(), m); });
  };
  auto missing = sd;
  missing.erase("layer2.1.bn1.running_var");
  EXPECT_NE(message(missing).find("'layer2.1.bn1.running_var' is missing"), std::string::npos)
      << message(missing);
  auto negative = sd;
  Tensor v = Tensor::empty({64}, DType::f32);
  std::fill(v.data_as<float>(), v.data_as<float>() + 64, 1.f);
  v.data_as<float>()[5] = -1.f;
  negative["bn1.running_var"] = v;
  EXPECT_NE(message(negative).find("bn1.running_var"), std::string::npos) << message(negative);
  auto wrong = sd;
  wrong["fc.weight"] = Tensor::zeros({4, 512}, DType::f32);
  EXPECT_NE(message(wrong).find("fc.weight"), std::string::npos) << message(wrong);
}

}  // namespace
}  // namespace rn50
