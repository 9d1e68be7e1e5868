// ResNet architecture tests: parameter/buffer names, shapes, dtypes and order against torchvision
// (tests/parity/resnet{18,50}_keys.txt, written by `torch_golden.py --list-keys --classes 1000`),
// parameter counts, the decayed-prefix slab layout, torchvision initialisation statistics,
// state_dict round trips and the errors of the public API. Runs on the "ref" backend (only
// allocation and copies are used, apart from one small forward).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>

#include "core/check.h"
#include "rn50/backend.h"
#include "rn50/model.h"

namespace rn50 {
namespace {

struct KeyLine {
  bool is_param;
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};

/// Parses "P|B <name> <F32|I64> <d0,d1,..|->" lines.
std::vector<KeyLine> read_keys(const std::string& arch) {
  const std::string path = std::string(RN50_SOURCE_DIR) + "/tests/parity/" + arch + "_keys.txt";
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  std::vector<KeyLine> out;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    std::istringstream ss(line);
    std::string kind, name, dt, shape;
    ss >> kind >> name >> dt >> shape;
    KeyLine k{kind == "P", name, dt == "I64" ? DType::i64 : DType::f32, {}};
    if (shape != "-") {
      std::istringstream ds(shape);
      std::string d;
      while (std::getline(ds, d, ',')) k.shape.push_back(std::stoll(d));
    }
    out.push_back(k);
  }
  return out;
}

std::vector<float> host_f32(Backend& be, const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), DType::f32, t.layout());
  be.copy(t, h);
  return std::vector<float>(h.data_as<float>(), h.data_as<float>() + h.numel());
}

class ModelArch : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelArch, NamesShapesOrderMatchTorchvision) {
  const std::string arch = GetParam();
  auto keys = read_keys(arch);
  ASSERT_FALSE(keys.empty());
  auto be = make_backend("ref");
  ResNet model(*be, arch_from_name(arch), ModelOptions{});

  std::vector<KeyLine> pk, bk;
  for (const auto& k : keys) (k.is_param ? pk : bk).push_back(k);
  ASSERT_EQ(model.params().size(), pk.size());
  for (size_t i = 0; i < pk.size(); ++i) {
    EXPECT_EQ(model.params()[i].name, pk[i].name) << "param " << i;
    EXPECT_EQ(model.params()[i].shape, pk[i].shape) << pk[i].name;
  }
  ASSERT_EQ(model.buffers().size(), bk.size());
  for (size_t i = 0; i < bk.size(); ++i) {
    EXPECT_EQ(model.buffers()[i].name, bk[i].name) << "buffer " << i;
    EXPECT_EQ(model.buffers()[i].shape, bk[i].shape) << bk[i].name;
    EXPECT_EQ(model.buffers()[i].dtype, bk[i].dtype) << bk[i].name;
  }
  auto sd = model.state_dict();
  ASSERT_EQ(sd.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(sd[i].first, keys[i].name) << "state_dict entry " << i;
    EXPECT_EQ(sd[i].second.shape(), keys[i].shape) << keys[i].name;
    EXPECT_EQ(sd[i].second.dtype(), keys[i].dtype) << keys[i].name;
  }
}

INSTANTIATE_TEST_SUITE_P(Torchvision, ModelArch, ::testing::Values("resnet18", "resnet50"));

TEST(ModelArchCounts, ParameterCountsMatchTorchvision) {
  // sum(p.numel() for p in torchvision.models.<arch>().parameters()), 1000 classes.
  const std::pair<const char*, int64_t> expected[] = {{"resnet18", 11689512},
                                                      {"resnet34", 21797672},
                                                      {"resnet50", 25557032},
                                                      {"resnet101", 44549160},
                                                      {"resnet152", 60192808}};
  auto be = make_backend("ref");
  for (const auto& [name, count] : expected) {
    ResNet model(*be, arch_from_name(name), ModelOptions{});
    EXPECT_EQ(model.num_params(), count) << name;
    int64_t sum = 0;
    for (const auto& p : model.params()) sum += p.numel();
    EXPECT_EQ(sum, count) << name;
    EXPECT_EQ(model.param_slab().numel(), count) << name;
    EXPECT_EQ(model.grad_slab().numel(), count) << name;
  }
}

TEST(ModelArchCounts, UnknownArchitectureThrows) {
  try {
    arch_from_name("resnet51");
    FAIL() << "expected rn50::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("resnet51"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("resnet50"), std::string::npos) << e.what();
  }
}

/// Whether a torchvision key names a conv or fc weight (the test's own, name-based rule).
bool name_is_decayed(const std::string& n) {
  const auto last = n.rfind('.');
  const std::string module = n.substr(0, last), leaf = n.substr(last + 1);
  const auto dot = module.rfind('.');
  const std::string mod = dot == std::string::npos ? module : module.substr(dot + 1);
  if (leaf != "weight") return false;
  return module == "fc" || mod.rfind("conv", 0) == 0 ||
         (mod == "0" && module.find("downsample") != std::string::npos);
}

TEST_P(ModelArch, DecayedPrefixIsExactlyConvAndFcWeights) {
  auto be = make_backend("ref");
  ResNet model(*be, arch_from_name(GetParam()), ModelOptions{});
  int64_t decayed = 0;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const auto& p : model.params()) {
    const bool d = name_is_decayed(p.name);
    EXPECT_EQ(is_decayed(p.kind), d) << p.name;
    if (d) {
      decayed += p.numel();
      EXPECT_LT(p.offset, model.decay_count()) << p.name;
      EXPECT_LE(p.offset + p.numel(), model.decay_count()) << p.name;
    } else {
      EXPECT_GE(p.offset, model.decay_count()) << p.name;
    }
    ranges.push_back({p.offset, p.offset + p.numel()});
  }
  EXPECT_EQ(model.decay_count(), decayed);
  // The parameters tile [0, num_params) without overlap.
  std::sort(ranges.begin(), ranges.end());
  int64_t at = 0;
  for (auto [b, e] : ranges) {
    EXPECT_EQ(b, at);
    at = e;
  }
  EXPECT_EQ(at, model.num_params());
  // param()/grad() are views at those offsets.
  for (const auto& p : model.params()) {
    EXPECT_EQ(model.param(p.name).data_as<float>(), model.param_slab().data_as<float>() + p.offset);
    EXPECT_EQ(model.grad(p.name).data_as<float>(), model.grad_slab().data_as<float>() + p.offset);
    EXPECT_EQ(model.param(p.name).shape(), p.shape);
  }
}

TEST(ModelArchInit, TorchvisionInitialisationStatistics) {
  auto be = make_backend("ref");
  ResNet model(*be, arch_from_name("resnet50"), ModelOptions{});
  model.init(42);
  for (const auto& p : model.params()) {
    auto v = host_f32(*be, model.param(p.name));
    const double n = static_cast<double>(v.size());
    double mean = 0, sq = 0;
    for (float x : v) mean += x, sq += double(x) * x;
    mean /= n;
    const double sd = std::sqrt(sq / n - mean * mean);
    switch (p.kind) {
      case ParamKind::conv_weight: {
        // kaiming_normal_(mode="fan_out", nonlinearity="relu"): std = sqrt(2 / (K*R*S)).
        const double expect = std::sqrt(2.0 / double(p.shape[0] * p.shape[2] * p.shape[3]));
        EXPECT_NEAR(sd / expect, 1.0, 0.04) << p.name << " (" << n << " values)";
        EXPECT_LT(std::abs(mean), 5 * expect / std::sqrt(n)) << p.name;
        break;
      }
      case ParamKind::bn_weight:
        for (float x : v) ASSERT_EQ(x, 1.f) << p.name;
        break;
      case ParamKind::bn_bias:
        for (float x : v) ASSERT_EQ(x, 0.f) << p.name;
        break;
      case ParamKind::fc_weight:
      case ParamKind::fc_bias: {
        // nn.Linear default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = 2048.
        const double bound = 1.0 / std::sqrt(2048.0);
        float lo = *std::min_element(v.begin(), v.end());
        float hi = *std::max_element(v.begin(), v.end());
        EXPECT_GE(lo, -bound) << p.name;
        EXPECT_LE(hi, bound) << p.name;
        // Uniform: std = bound / sqrt(3), extremes close to the bounds.
        EXPECT_NEAR(sd / (bound / std::sqrt(3.0)), 1.0, p.kind == ParamKind::fc_weight ? 0.01 : 0.1)
            << p.name;
        EXPECT_LT(lo, -0.99 * bound) << p.name;
        EXPECT_GT(hi, 0.99 * bound) << p.name;
        break;
      }
    }
  }
  for (const auto& b : model.buffers()) {
    Tensor t = model.buffer(b.name);
    if (b.dtype == DType::i64) {
      EXPECT_EQ(*t.data_as<int64_t>(), 0) << b.name;
      continue;
    }
    const float expect = b.name.find("running_var") != std::string::npos ? 1.f : 0.f;
    for (float x : host_f32(*be, t)) ASSERT_EQ(x, expect) << b.name;
  }
}

TEST(ModelArchInit, DeterministicGivenSeed) {
  auto be = make_backend("ref");
  ResNet a(*be, arch_from_name("resnet18"), ModelOptions{});
  ResNet b(*be, arch_from_name("resnet18"), ModelOptions{});
  a.init(7);
  b.init(7);
  auto va = host_f32(*be, a.param_slab());
  EXPECT_EQ(va, host_f32(*be, b.param_slab()));
  b.init(8);
  auto vb = host_f32(*be, b.param_slab());
  int64_t differ = 0;
  for (int64_t i = 0; i < a.decay_count(); ++i) differ += va[i] != vb[i];
  EXPECT_GT(differ, a.decay_count() * 99 / 100);
}

TEST(ModelArchInit, ZeroInitResidualZeroesLastBnOfEachBlock) {
  auto be = make_backend("ref");
  for (const char* arch : {"resnet18", "resnet50"}) {
    ModelOptions opt;
    opt.zero_init_residual = true;
    ResNet model(*be, arch_from_name(arch), opt);
    model.init(3);
    const std::string last = std::string(arch) == "resnet50" ? ".bn3.weight" : ".bn2.weight";
    int zeroed = 0;
    for (const auto& p : model.params()) {
      if (p.kind != ParamKind::bn_weight) continue;
      const bool is_last = p.name.size() > last.size() &&
                           p.name.compare(p.name.size() - last.size(), last.size(), last) == 0 &&
                           p.name.rfind("layer", 0) == 0;
      auto v = host_f32(*be, model.param(p.name));
      for (float x : v) ASSERT_EQ(x, is_last ? 0.f : 1.f) << arch << " " << p.name;
      zeroed += is_last;
    }
    const auto spec = arch_from_name(arch);
    EXPECT_EQ(zeroed, std::accumulate(spec.layers.begin(), spec.layers.end(), 0)) << arch;
  }
}

TEST(ModelArchOptions, NumClassesChangesFcShape) {
  auto be = make_backend("ref");
  ModelOptions opt;
  opt.num_classes = 10;
  ResNet m50(*be, arch_from_name("resnet50"), opt);
  EXPECT_EQ(m50.param("fc.weight").shape(), (std::vector<int64_t>{10, 2048}));
  EXPECT_EQ(m50.param("fc.bias").shape(), (std::vector<int64_t>{10}));
  EXPECT_EQ(m50.num_params(), 25557032 - 990 * 2048 - 990);
  ResNet m18(*be, arch_from_name("resnet18"), opt);
  EXPECT_EQ(m18.param("fc.weight").shape(), (std::vector<int64_t>{10, 512}));
  opt.num_classes = 0;
  EXPECT_THROW(ResNet(*be, arch_from_name("resnet18"), opt), Error);
}

TEST(ModelArchState, StateDictRoundTrip) {
  auto be = make_backend("ref");
  ResNet a(*be, arch_from_name("resnet18"), ModelOptions{});
  a.init(11);
  auto sd = a.state_dict();
  // Perturb running stats and a counter so buffers are exercised too.
  std::map<std::string, Tensor> m;
  for (auto& [k, t] : sd) {
    if (k.find("running_mean") != std::string::npos) t.fill(0.25);
    if (k.find("num_batches_tracked") != std::string::npos) t.fill(17);
    m[k] = t;
  }
  ResNet b(*be, arch_from_name("resnet18"), ModelOptions{});
  b.load_state_dict(m, true);
  auto sd2 = b.state_dict();
  ASSERT_EQ(sd.size(), sd2.size());
  for (size_t i = 0; i < sd.size(); ++i) {
    ASSERT_EQ(sd[i].first, sd2[i].first);
    ASSERT_EQ(sd[i].second.nbytes(), sd2[i].second.nbytes());
    EXPECT_EQ(0, std::memcmp(sd[i].second.data(), sd2[i].second.data(), sd[i].second.nbytes()))
        << sd[i].first;
  }
  EXPECT_EQ(*b.buffer("layer2.1.bn1.num_batches_tracked").data_as<int64_t>(), 17);
}

TEST(ModelArchState, LoadStateDictErrorsNameTheKey) {
  auto be = make_backend("ref");
  ResNet a(*be, arch_from_name("resnet18"), ModelOptions{});
  a.init(1);
  std::map<std::string, Tensor> sd;
  for (auto& [k, t] : a.state_dict()) sd[k] = t;

  auto expect_error = [&](const std::map<std::string, Tensor>& s, bool strict,
                          std::vector<std::string> needles) {
    try {
      a.load_state_dict(s, strict);
      ADD_FAILURE() << "expected rn50::Error";
    } catch (const Error& e) {
      for (const auto& n : needles)
        EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what() << " lacks " << n;
    }
  };
  {  // shape mismatch: names the key and both shapes
    auto s = sd;
    s["fc.weight"] = Tensor::zeros({10, 512}, DType::f32);
    expect_error(s, true, {"fc.weight", "[10, 512]", "[1000, 512]"});
    expect_error(s, false, {"fc.weight", "[10, 512]", "[1000, 512]"});
  }
  {  // missing and unexpected keys in strict mode
    auto s = sd;
    s.erase("layer3.1.bn2.running_var");
    s["layer9.0.conv1.weight"] = Tensor::zeros({1}, DType::f32);
    expect_error(s, true, {"layer3.1.bn2.running_var", "layer9.0.conv1.weight"});
    a.load_state_dict(s, false);  // non-strict: loads what matches, ignores the rest
  }
  {  // num_batches_tracked is optional
    auto s = sd;
    for (auto it = s.begin(); it != s.end();)
      it = it->first.find("num_batches_tracked") != std::string::npos ? s.erase(it) : ++it;
    a.load_state_dict(s, true);
  }
  {  // wrong dtype
    auto s = sd;
    s["bn1.weight"] = Tensor::zeros({64}, DType::f64);
    expect_error(s, true, {"bn1.weight", "F64"});
  }
  EXPECT_THROW(a.param("layer1.0.conv3.weight"), Error);  // resnet18 has no conv3
  EXPECT_THROW(a.buffer("bn1.running_std"), Error);
}

TEST(ModelArchSchedule, ForwardShapesAndInputChecks) {
  auto be = make_backend("ref");
  ModelOptions opt;
  opt.num_classes = 5;
  opt.layout = Layout::NHWC;
  ResNet model(*be, arch_from_name("resnet18"), opt);
  model.init(5);
  Tensor x = Tensor::empty({2, 3, 32, 40}, DType::f32, Layout::NHWC);
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = std::sin(0.37 * i);
  // Backward before any training forward is refused.
  Tensor dl = Tensor::zeros({2, 5}, DType::f32);
  EXPECT_THROW(model.backward(dl), Error);
  const Tensor& y = model.forward(x, false);
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{2, 5}));
  EXPECT_THROW(model.backward(dl), Error);  // eval forward keeps nothing
  model.forward(x, true);
  EXPECT_EQ(*model.buffer("bn1.num_batches_tracked").data_as<int64_t>(), 1);
  model.backward(dl);
  // Wrong layout / channels are refused with the expected layout named.
  Tensor xc = x.to_layout(Layout::NCHW);
  try {
    model.forward(xc, true);
    ADD_FAILURE() << "expected rn50::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NHWC"), std::string::npos) << e.what();
  }
  EXPECT_THROW(model.forward(Tensor::zeros({2, 4, 32, 32}, DType::f32, Layout::NHWC), true),
               Error);
  EXPECT_THROW(model.backward(Tensor::zeros({3, 5}, DType::f32)), Error);
}

}  // namespace
}  // namespace rn50

namespace rn50 {
namespace {

// backward() reports each parameter's gradient exactly once, in grad_ready_order(), and when it
// does the f32 gradient is already final (it equals the slab after backward returns).
TEST(ModelArchBackward, GradReadyHookFollowsTheOrderWithFinalGradients) {
  auto be = make_backend("ref");
  ModelOptions mo;
  mo.num_classes = 5;
  ResNet m(*be, ArchSpec{"bottleneck2111", true, {2, 1, 1, 1}}, mo);
  m.init(1);
  const std::vector<int>& order = m.grad_ready_order();
  ASSERT_EQ(order.size(), m.params().size());
  std::set<int> distinct(order.begin(), order.end());
  EXPECT_EQ(distinct.size(), order.size()) << "every parameter exactly once";
  EXPECT_EQ(m.params()[order.front()].name, "fc.weight");
  EXPECT_EQ(m.params()[order.back()].name, "conv1.weight");
  std::vector<int> seen;
  std::vector<std::vector<float>> at_ready;
  m.set_grad_ready_hook([&](int i) {
    seen.push_back(i);
    Tensor g = m.grad(m.params()[i].name);
    at_ready.emplace_back(g.data_as<float>(), g.data_as<float>() + g.numel());
  });
  Tensor x = Tensor::empty({2, 3, 32, 32}, DType::f32, Layout::NHWC);
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = std::sin(0.37 * i);
  const Tensor& z = m.forward(x, true);
  Tensor dz = Tensor::empty(z.shape(), DType::f32);
  for (int64_t i = 0; i < dz.numel(); ++i) dz.data_as<float>()[i] = std::cos(0.11 * i);
  m.backward(dz);
  ASSERT_EQ(seen, order);
  for (size_t k = 0; k < seen.size(); ++k) {
    Tensor g = m.grad(m.params()[seen[k]].name);
    ASSERT_EQ(0, std::memcmp(g.data(), at_ready[k].data(), g.nbytes()))
        << m.params()[seen[k]].name << " changed after it was reported ready";
  }
}

}  // namespace
}  // namespace rn50
