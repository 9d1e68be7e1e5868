// ImageFolder scan and the threaded loader: batch shapes and labels, corrupt files skipped and
// counted, determinism across thread counts, val coverage, restart/teardown, synthetic source,
// and (when present) the real Imagenette data.
#include <gtest/gtest.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/decode.h"
#include "data/rng.h"
#include "data/transforms.h"
#include "data_test_util.h"
#include "rn50/data.h"
#include "require.h"

namespace fs = std::filesystem;
using namespace rn50;

namespace {

const char* const kPython = rn50::test::python();

using testutil::run_epoch;
using testutil::same_batches;
using testutil::TempDir;
using testutil::write_bytes;
using testutil::write_text;

/// Writes a random w x h JPEG (quality 90, 4:2:0) through TurboJPEG.
void write_jpeg(const std::string& path, int w, int h, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<uint8_t> px(size_t(w) * h * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = uint8_t(64 + (i * 7 % 97) + g() % 64);
  tjhandle t = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  ASSERT_EQ(tjCompress2(t, px.data(), w, w * 3, h, TJPF_RGB, &buf, &size, TJSAMP_420, 90, 0), 0);
  write_bytes(path, buf, size);
  tjFree(buf);
  tjDestroy(t);
}

/// root/{B,a,c}/...: 3 classes ("B" < "a" < "c" in byte order), 4 images each, different sizes,
/// one in a nested folder, one non-image file, and (optionally) one corrupt .jpg in class "a".
void make_folder(const std::string& root, bool corrupt) {
  int k = 0;
  for (const char* cls : {"B", "a", "c"}) {
    for (int i = 0; i < 4; ++i, ++k) {
      const std::string dir = root + "/" + cls + (i == 3 ? "/sub" : "");
      if (corrupt && std::string(cls) == "a" && i == 1) {
        write_text(dir + "/img1.jpg", "this is not a jpeg");
        continue;
      }
      write_jpeg(dir + "/img" + std::to_string(i) + (i == 2 ? ".JPEG" : ".jpg"), 40 + 9 * k,
                 30 + 5 * (k % 5), uint64_t(k));
    }
    write_text(root + "/" + cls + "/notes.txt", "not an image");
  }
}

/// Exact mode (batches comparable with the PIL-exact transforms) and a bad-file tolerance that
/// lets the 1-in-12 corrupt file of make_folder be skipped.
LoaderOptions small_opts(int workers) {
  LoaderOptions o;
  o.batch_size = 4;
  o.crop_size = 32;
  o.resize_short = 36;
  o.workers = workers;
  o.prefetch = 2;
  o.seed = 123;
  o.exact_decode = true;
  o.max_bad_fraction = 0.5;
  return o;
}

TEST(ImageFolder, ScanOrdersClassesAndFilesLikeTorchvision) {
  TempDir dir("scan");
  make_folder(dir.path, false);
  const ImageFolderIndex idx = ImageFolderIndex::scan(dir.path);
  EXPECT_EQ(idx.classes, (std::vector<std::string>{"B", "a", "c"}));
  ASSERT_EQ(idx.samples.size(), 12u);
  // Files of a folder come before those of its sub-folders (sorted os.walk order).
  EXPECT_EQ(idx.samples[0].first, dir.path + "/B/img0.jpg");
  EXPECT_EQ(idx.samples[2].first, dir.path + "/B/img2.JPEG");
  EXPECT_EQ(idx.samples[3].first, dir.path + "/B/sub/img3.jpg");
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(idx.samples[i].second, int(i / 4));

  if (std::system((std::string(kPython) + " -c 'import torchvision' >/dev/null 2>&1").c_str()) ==
      0) {  // the exact list torchvision's ImageFolder builds
    const std::string out = dir.path + "/tv.txt";
    const std::string cmd = std::string(kPython) +
                            " -c 'import sys; from torchvision.datasets.folder import "
                            "make_dataset, find_classes; c, m = find_classes(sys.argv[1]); "
                            "[print(p, t) for p, t in make_dataset(sys.argv[1], m, "
                            "extensions=(\".jpg\", \".jpeg\", \".png\"))]' " +
                            dir.path + " > " + out;
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    std::ifstream f(out);
    std::string p;
    int t = 0;
    size_t i = 0;
    while (f >> p >> t) {
      ASSERT_LT(i, idx.samples.size());
      EXPECT_EQ(idx.samples[i].first, p);
      EXPECT_EQ(idx.samples[i].second, t);
      ++i;
    }
    EXPECT_EQ(i, idx.samples.size());
  }
}

TEST(ImageFolder, ScanErrorsNameTheFolder) {
  TempDir dir("scan_err");
  auto message = [](const std::string& root) {
    try {
      ImageFolderIndex::scan(root);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string missing = dir.path + "/nope";
  EXPECT_NE(message(missing).find(missing), std::string::npos) << message(missing);
  write_text(dir.path + "/flat/x.jpg", "x");  // files but no class folders
  EXPECT_NE(message(dir.path + "/flat").find("class folder"), std::string::npos);
  write_text(dir.path + "/emptycls/a/x.txt", "x");  // a class without images
  EXPECT_NE(message(dir.path + "/emptycls").find("no valid image"), std::string::npos);
}

TEST(Loader, TrainBatchesHaveShapesLabelsAndSkipTheCorruptFile) {
  TempDir dir("train");
  make_folder(dir.path, true);
  auto src = make_image_folder_source(dir.path, Split::train, small_opts(2));
  EXPECT_EQ(src->num_samples(), 12);
  EXPECT_EQ(src->num_classes(), 3);
  EXPECT_EQ(src->batches_per_epoch(), 3);
  EXPECT_EQ(src->classes(), (std::vector<std::string>{"B", "a", "c"}));
  ::testing::internal::CaptureStderr();
  src->start_epoch(0);
  Batch b;
  int batches = 0;
  std::map<int, int> label_count;
  while (src->next(b)) {
    ++batches;
    EXPECT_EQ(b.images.shape(), (std::vector<int64_t>{4, 3, 32, 32}));
    EXPECT_EQ(b.images.layout(), Layout::NHWC);
    EXPECT_EQ(b.images.dtype(), DType::u8);
    EXPECT_EQ(b.labels.shape(), (std::vector<int64_t>{4}));
    EXPECT_EQ(b.labels.dtype(), DType::i32);
    EXPECT_EQ(b.size, 4);
    for (int i = 0; i < 4; ++i) {
      const int l = b.labels.data_as<int32_t>()[i];
      EXPECT_TRUE(l >= 0 && l < 3) << l;
      ++label_count[l];
    }
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(batches, 3);
  EXPECT_EQ(src->bad_samples(), 1);
  EXPECT_NE(err.find(dir.path + "/a/img1.jpg"), std::string::npos) << err;
  // 11 good files for 12 slots: one of them was used twice, as the corrupt file's replacement.
  EXPECT_EQ(label_count[0] + label_count[1] + label_count[2], 12);
  EXPECT_GE(label_count[1], 2);

  // The next epoch: a new order, the bad file counted again but logged only once.
  ::testing::internal::CaptureStderr();
  src->start_epoch(1);
  while (src->next(b)) {
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(src->bad_samples(), 1);
}

TEST(Loader, SameSeedGivesIdenticalBatchesForAnyWorkerCount) {
  TempDir dir("determinism");
  make_folder(dir.path, true);
  ::testing::internal::CaptureStderr();
  auto one = make_image_folder_source(dir.path, Split::train, small_opts(1));
  auto three = make_image_folder_source(dir.path, Split::train, small_opts(3));
  const auto a0 = run_epoch(*one, 0), a1 = run_epoch(*one, 1);
  const auto b0 = run_epoch(*three, 0), b1 = run_epoch(*three, 1);
  LoaderOptions other = small_opts(2);
  other.seed = 124;
  auto reseeded = make_image_folder_source(dir.path, Split::train, other);
  const auto c0 = run_epoch(*reseeded, 0);
  ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(same_batches(a0, b0));
  EXPECT_TRUE(same_batches(a1, b1));
  EXPECT_FALSE(same_batches(a0, a1));  // reshuffled and re-augmented each epoch
  EXPECT_FALSE(same_batches(a0, c0));

  // The train pixels are the documented transform of the documented sample.
  const ImageFolderIndex idx = ImageFolderIndex::scan(dir.path);
  const auto order = data::epoch_permutation(12, 123, 0);
  for (int64_t pos = 0; pos < 12; ++pos) {
    const auto& [path, label] = idx.samples[size_t(order[size_t(pos)])];
    if (path.find("/a/img1.jpg") != std::string::npos) continue;  // the corrupt one
    const Image img = data::decode_image_file(path);
    std::vector<uint8_t> expect(32 * 32 * 3);
    data::SampleRng rng(123, 0, uint64_t(pos), 0);
    data::train_transform(img, 32, rng, expect.data());
    const Batch& b = a0[size_t(pos / 4)];
    EXPECT_EQ(b.labels.data_as<int32_t>()[pos % 4], label);
    EXPECT_EQ(std::memcmp(expect.data(), b.images.data_as<uint8_t>() + (pos % 4) * 32 * 32 * 3,
                          expect.size()),
              0)
        << "position " << pos;
  }
}

TEST(Loader, ValCoversEverySampleOnceWithAShortLastBatch) {
  TempDir dir("val");
  make_folder(dir.path, false);
  LoaderOptions o = small_opts(3);
  o.batch_size = 5;
  auto src = make_image_folder_source(dir.path, Split::val, o);
  EXPECT_EQ(src->batches_per_epoch(), 3);
  const ImageFolderIndex idx = ImageFolderIndex::scan(dir.path);
  for (int epoch = 0; epoch < 2; ++epoch) {
    const auto batches = run_epoch(*src, epoch);
    ASSERT_EQ(batches.size(), 3u);
    EXPECT_EQ(batches[0].size, 5);
    EXPECT_EQ(batches[2].size, 2);
    EXPECT_EQ(batches[2].images.dim(0), 5);  // full-size tensors, `size` valid rows
    EXPECT_EQ(batches[2].labels.data_as<int32_t>()[2], -1);
    int64_t k = 0;
    for (const Batch& b : batches) {
      for (int64_t i = 0; i < b.size; ++i, ++k) {
        const auto& [path, label] = idx.samples[size_t(k)];
        EXPECT_EQ(b.labels.data_as<int32_t>()[i], label);
        std::vector<uint8_t> expect(32 * 32 * 3);
        data::eval_transform(data::decode_image_file(path), 36, 32, expect.data());
        EXPECT_EQ(std::memcmp(expect.data(), b.images.data_as<uint8_t>() + i * 32 * 32 * 3,
                              expect.size()),
                  0)
            << path;
      }
    }
    EXPECT_EQ(k, 12);
    EXPECT_EQ(src->bad_samples(), 0);
  }
}

TEST(Loader, HeldBatchesAreNeverOverwritten) {
  TempDir dir("held");
  make_folder(dir.path, false);
  LoaderOptions o = small_opts(2);
  o.batch_size = 2;
  o.prefetch = 1;
  auto src = make_image_folder_source(dir.path, Split::train, o);
  const auto copies = run_epoch(*src, 5);
  src->start_epoch(5);
  std::vector<Batch> held;  // keep every batch's tensors alive (no copies)
  Batch b;
  while (src->next(b)) held.push_back(b);
  EXPECT_TRUE(same_batches(copies, held));
  // Run more epochs while holding them; they must stay intact.
  run_epoch(*src, 6);
  run_epoch(*src, 7);
  EXPECT_TRUE(same_batches(copies, held));
}

TEST(Loader, RestartMidEpochAndDestroyMidEpochDoNotHang) {
  TempDir dir("restart");
  make_folder(dir.path, false);
  auto src = make_image_folder_source(dir.path, Split::train, small_opts(3));
  const auto full = run_epoch(*src, 2);
  src->start_epoch(0);
  Batch b;
  ASSERT_TRUE(src->next(b));
  EXPECT_TRUE(same_batches(run_epoch(*src, 2), full));  // restart gives the same epoch again
  src->start_epoch(1);
  ASSERT_TRUE(src->next(b));
  src.reset();  // workers are mid-epoch: the destructor must join them
  auto never_started = make_image_folder_source(dir.path, Split::val, small_opts(2));
  EXPECT_THROW(never_started->next(b), Error);
  never_started.reset();
}

TEST(Loader, ManyConsecutiveCorruptFilesAreAnError) {
  TempDir dir("allbad");
  for (int i = 0; i < 20; ++i)
    write_text(dir.path + "/x/" + std::to_string(100 + i) + ".jpg", "bad");
  write_jpeg(dir.path + "/y/good.jpg", 40, 40, 1);
  ::testing::internal::CaptureStderr();
  LoaderOptions o = small_opts(2);
  o.max_bad_fraction = 1.0;  // only the 16-attempts rule can stop it
  auto src = make_image_folder_source(dir.path, Split::train, o);
  src->start_epoch(0);
  Batch b;
  try {
    while (src->next(b)) {
    }
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("could not be decoded"), std::string::npos) << e.what();
  }
  ::testing::internal::GetCapturedStderr();
}

TEST(Loader, RejectsBadOptionsAndDatasetRoots) {
  TempDir dir("opts");
  make_folder(dir.path + "/train", false);
  make_folder(dir.path + "/val", false);
  EXPECT_THROW(make_image_folder_source(dir.path, Split::train, small_opts(1)), Error);
  LoaderOptions o = small_opts(1);
  o.batch_size = 0;
  EXPECT_THROW(make_image_folder_source(dir.path + "/train", Split::train, o), Error);
  o = small_opts(1);
  o.batch_size = 13;  // more than the 12 samples, drop_last
  EXPECT_THROW(make_image_folder_source(dir.path + "/train", Split::train, o), Error);
  o.drop_last = false;
  EXPECT_EQ(make_image_folder_source(dir.path + "/train", Split::train, o)->batches_per_epoch(), 1);
}

TEST(Synthetic, ServesFixedRandomBatches) {
  LoaderOptions o;
  o.batch_size = 8;
  o.crop_size = 16;
  o.seed = 5;
  auto src = make_synthetic_source(100, 7, o);
  EXPECT_EQ(src->batches_per_epoch(), 12);
  EXPECT_EQ(src->num_classes(), 7);
  EXPECT_EQ(src->classes().size(), 7u);
  const auto e0 = run_epoch(*src, 0), e1 = run_epoch(*src, 1);
  ASSERT_EQ(e0.size(), 12u);
  EXPECT_TRUE(same_batches(e0, e1));
  EXPECT_FALSE(same_batches({e0[0]}, {e0[1]}));
  for (const Batch& b : e0) {
    EXPECT_EQ(b.images.shape(), (std::vector<int64_t>{8, 3, 16, 16}));
    EXPECT_EQ(b.images.layout(), Layout::NHWC);
    for (int i = 0; i < 8; ++i) {
      const int l = b.labels.data_as<int32_t>()[i];
      EXPECT_TRUE(l >= 0 && l < 7);
    }
  }
  auto same_seed = make_synthetic_source(100, 7, o);
  EXPECT_TRUE(same_batches(run_epoch(*same_seed, 0), e0));
  EXPECT_THROW(make_synthetic_source(7, 7, o), Error);
}

const std::string kImagenette = std::string(RN50_SOURCE_DIR) + "/../shared/data/imagenette";

TEST(Imagenette, ScanAndLoad) {
  RN50_REQUIRE_OR_SKIP("data", fs::exists(kImagenette + "/train"), "no " << kImagenette);
  const ImageFolderIndex idx = ImageFolderIndex::scan(kImagenette + "/train");
  EXPECT_EQ(idx.classes.size(), 10u);
  EXPECT_EQ(idx.samples.size(), 9469u);
  EXPECT_EQ(idx.classes[0], "n01440764");
  LoaderOptions o;
  o.batch_size = 64;
  o.workers = 2;  // fast decoding (the default)
  auto train = make_image_folder_source(kImagenette + "/train", Split::train, o);
  EXPECT_EQ(train->batches_per_epoch(), 9469 / 64);
  train->start_epoch(0);
  Batch b;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(train->next(b));
    EXPECT_EQ(b.images.shape(), (std::vector<int64_t>{64, 3, 224, 224}));
    EXPECT_EQ(b.size, 64);
  }
  EXPECT_EQ(train->bad_samples(), 0);
  auto val = make_image_folder_source(kImagenette + "/val", Split::val, o);
  EXPECT_EQ(val->num_samples(), 3925);
  val->start_epoch(0);
  ASSERT_TRUE(val->next(b));
  EXPECT_EQ(b.size, 64);
}

TEST(Imagenette, EvalPipelineMatchesTorchvision) {
  RN50_REQUIRE_OR_SKIP("data", fs::exists(kImagenette + "/val"), "no " << kImagenette);
  RN50_REQUIRE_OR_SKIP(
      "torch",
      std::system((std::string(kPython) + " -c 'import torchvision' >/dev/null 2>&1").c_str()) == 0,
      "needs the test python (RN50_TEST_PYTHON) with torchvision");
  // Real files through the whole chain: decode + Resize(256) + CenterCrop(224) vs torchvision's
  // pil_loader + transforms. Exact equality expected.
  const ImageFolderIndex idx = ImageFolderIndex::scan(kImagenette + "/val");
  TempDir dir("imagenette_eval");
  std::ofstream spec(dir.path + "/spec.txt");
  const int n = 12;
  for (int i = 0; i < n; ++i) {
    spec << "evalfile " << idx.samples[size_t(i) * idx.samples.size() / n].first << " 256 224 "
         << dir.path << "/out" << i << ".raw\n";
  }
  spec.close();
  const std::string helpers = std::string(RN50_SOURCE_DIR) + "/tests/data_helpers.py";
  ASSERT_EQ(
      std::system(
          (std::string(kPython) + " " + helpers + " transforms " + dir.path + "/spec.txt").c_str()),
      0);
  std::vector<uint8_t> ours(224 * 224 * 3);
  for (int i = 0; i < n; ++i) {
    const std::string& path = idx.samples[size_t(i) * idx.samples.size() / n].first;
    data::eval_transform(data::decode_image_file(path), 256, 224, ours.data());
    std::ifstream f(dir.path + "/out" + std::to_string(i) + ".raw", std::ios::binary);
    const std::vector<uint8_t> ref{std::istreambuf_iterator<char>(f),
                                   std::istreambuf_iterator<char>()};
    EXPECT_EQ(ours, ref) << path;
  }
}

}  // namespace
