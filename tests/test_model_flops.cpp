// The FLOP count of the network description (forward_flops, train_flops in rn50/graph.h), the
// roofline's GFLOP per image: ResNet-50 at 224 px against torchvision's published 4.09 GMAC, a
// small case counted by hand, and every architecture at several sizes and class counts against
// torchvision's own modules counted by forward hooks (an independent count: torch's shapes,
// not rn50's shape rules).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "rn50/error.h"
#include "rn50/graph.h"
#include "test_train_util.h"

namespace rn50 {
namespace {

// torchvision's model table lists ResNet-50's cost as 4.09 GFLOPS (multiply-adds) at 224 px.
TEST(Flops, ResNet50At224IsTorchvisionsPublishedCount) {
  const NetworkDesc d = describe(arch_from_name("resnet50"), 1000);
  const double gmac = forward_flops(d, 224, 224) / 2 / 1e9;
  EXPECT_NEAR(gmac, 4.09, 0.01 * 4.09);
  EXPECT_DOUBLE_EQ(train_flops(d, 224, 224), 3 * forward_flops(d, 224, 224));
}

// ResNet-18 at 32 x 32 with 10 classes, layer by layer by hand (torch's floor rule for sizes):
// conv1 7x7/2 -> 16x16, maxpool -> 8x8, layer1 at 8x8, layer2 4x4, layer3 2x2, layer4 1x1.
TEST(Flops, ResNet18At32CountedByHand) {
  const double stem = 64.0 * 3 * 49 * 16 * 16;
  const double layer1 = 4 * (64.0 * 64 * 9 * 8 * 8);
  // Per stage s > 1 at output side o: first block conv1 (stride 2, C/2 -> C), conv2, downsample
  // 1x1 (C/2 -> C), then a second block of two C -> C 3x3 convs.
  auto stage = [](double c, double o) {
    return c * (c / 2) * 9 * o * o + c * c * 9 * o * o + c * (c / 2) * o * o +
           2 * (c * c * 9 * o * o);
  };
  const double fc = 512.0 * 10;
  const double macs = stem + layer1 + stage(128, 4) + stage(256, 2) + stage(512, 1) + fc;
  const NetworkDesc d = describe(arch_from_name("resnet18"), 10);
  EXPECT_DOUBLE_EQ(forward_flops(d, 32, 32), 2 * macs);
  EXPECT_THROW(forward_flops(d, 0, 32), Error);
}

// Every architecture at 224 px with 1000 classes, and at odd and non-square sizes with 1000 and
// 10 classes: the description's count equals torchvision's modules counted by forward hooks,
// exactly.
TEST(Flops, EveryArchMatchesTorchvisionForwardHooks) {
  RN50_REQUIRE_OR_SKIP("torch", rn50_test::python_has("torch, torchvision"),
                       "needs " << rn50::test::python() << " with torch and torchvision");
  const std::string script = R"PY(
import json, torch, torchvision
out = []
for arch in ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"]:
    for classes in [1000, 10]:
        m = getattr(torchvision.models, arch)(num_classes=classes).eval()
        for (h, w) in ([(224, 224)] if classes == 1000 else []) + [(97, 131), (64, 48)]:
            macs = [0]
            def conv(mod, inp, o):
                macs[0] += o.numel() * (mod.in_channels // mod.groups) * mod.kernel_size[0] * mod.kernel_size[1]
            def fc(mod, inp, o):
                macs[0] += o.numel() * mod.in_features
            hs = [x.register_forward_hook(conv) for x in m.modules() if isinstance(x, torch.nn.Conv2d)]
            hs += [x.register_forward_hook(fc) for x in m.modules() if isinstance(x, torch.nn.Linear)]
            with torch.no_grad():
                m(torch.zeros(1, 3, h, w))
            for x in hs: x.remove()
            out.append({"arch": arch, "classes": classes, "h": h, "w": w, "macs": macs[0]})
print(json.dumps(out))
)PY";
  std::string output;
  const int rc = rn50_test::run_command(
      std::string(rn50::test::python()) + " -c " + rn50_test::sh_quote(script), &output);
  ASSERT_EQ(rc, 0) << output;
  const nlohmann::json all = nlohmann::json::parse(output.substr(output.rfind('[')));
  ASSERT_EQ(all.size(), 25u);
  for (const nlohmann::json& c : all) {
    const NetworkDesc d = describe(arch_from_name(c["arch"]), c["classes"].get<int>());
    EXPECT_DOUBLE_EQ(forward_flops(d, c["h"], c["w"]) / 2, c["macs"].get<double>())
        << c.dump();
  }
}

}  // namespace
}  // namespace rn50
