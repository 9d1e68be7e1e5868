// Decoding: every JPEG/PNG variant must equal PIL's Image.open(f).convert("RGB") exactly; broken
// files must throw rn50::Error naming the path and the reason.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/decode.h"
#include "require.h"

namespace fs = std::filesystem;
using namespace rn50;

namespace {

const char* const kPython = rn50::test::python();
const std::string kHelpers = std::string(RN50_SOURCE_DIR) + "/tests/data_helpers.py";

bool have_pil() {
  static const bool ok =
      std::system((std::string(kPython) + " -c 'import PIL, numpy' >/dev/null 2>&1").c_str()) == 0;
  return ok;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

[[maybe_unused]] void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

/// Fixture files made once by data_helpers.py (PIL) in a temporary folder.
class DecodeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = (fs::temp_directory_path() / ("rn50_test_decode_" + std::to_string(getpid()))).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    if (!have_pil()) return;
    const std::string cmd = std::string(kPython) + " " + kHelpers + " fixtures " + dir_;
    ok_ = std::system(cmd.c_str()) == 0;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override {
    RN50_REQUIRE_OR_SKIP("torch", have_pil(),
                         "needs the test python (RN50_TEST_PYTHON) with PIL and numpy");
    ASSERT_TRUE(ok_) << "data_helpers.py fixtures failed";
  }
  static std::string path(const std::string& name) { return dir_ + "/" + name; }
  static inline std::string dir_;
  static inline bool ok_ = false;
};

TEST_F(DecodeTest, MatchesPilExactlyAndRejectsWhatPilRejects) {
  std::ifstream manifest(path("manifest.txt"));
  std::string line;
  int ok = 0, failed = 0;
  while (std::getline(manifest, line)) {
    std::istringstream ss(line);
    std::string name, status;
    ss >> name >> status;
    SCOPED_TRACE(name);
    if (status == "fail") {
      try {
        data::decode_image_file(path(name));
        ADD_FAILURE() << "PIL rejects " << name << " but rn50 decoded it";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(path(name)), std::string::npos) << e.what();
      }
      ++failed;
      continue;
    }
    int w = 0, h = 0;
    ss >> w >> h;
    const Image img = data::decode_image_file(path(name));
    ASSERT_EQ(img.width, w);
    ASSERT_EQ(img.height, h);
    const std::vector<uint8_t> ref = read_bytes(path(name + ".rgb"));
    ASSERT_EQ(img.pixels.size(), ref.size());
    size_t diff = 0;
    int max_diff = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const int d = std::abs(int(img.pixels[i]) - int(ref[i]));
      diff += d != 0;
      max_diff = std::max(max_diff, d);
    }
    EXPECT_EQ(diff, 0u) << "pixels differing from PIL (max |diff| " << max_diff << ")";
    ++ok;
  }
  EXPECT_GE(ok, 20);
  EXPECT_GE(failed, 6);
}

TEST_F(DecodeTest, ErrorsNameThePathAndTheReason) {
  auto message = [](const std::string& p) {
    try {
      data::decode_image_file(p);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string empty = message(path("empty.jpg"));
  EXPECT_NE(empty.find(path("empty.jpg")), std::string::npos) << empty;
  EXPECT_NE(empty.find("empty"), std::string::npos) << empty;
  const std::string random = message(path("random.jpg"));
  EXPECT_NE(random.find("not a JPEG or PNG"), std::string::npos) << random;
  const std::string trunc = message(path("truncated.jpg"));
  EXPECT_NE(trunc.find("truncated"), std::string::npos) << trunc;
  const std::string trunc_png = message(path("truncated.png"));
  EXPECT_NE(trunc_png.find(path("truncated.png")), std::string::npos) << trunc_png;
  const std::string missing = message(path("no_such_file.jpg"));
  EXPECT_NE(missing.find("cannot open"), std::string::npos) << missing;
}

TEST_F(DecodeTest, TruncatedAnywhereInTheScanIsAnError) {
  const std::vector<uint8_t> jpg = read_bytes(path("big_odd.jpg"));
  ASSERT_TRUE(data::jpeg_has_eoi(jpg.data(), jpg.size()));
  for (size_t cut : {size_t{300}, jpg.size() / 4, jpg.size() / 2, jpg.size() - 100, jpg.size() - 3,
                     jpg.size() - 1}) {
    SCOPED_TRACE(cut);
    EXPECT_FALSE(data::jpeg_has_eoi(jpg.data(), cut));
    Image img;
    EXPECT_THROW(data::decode_image(jpg.data(), cut, "cut.jpg", img), Error);
  }
}

TEST_F(DecodeTest, ExtraneousBytesBeforeAMarkerAreAcceptedLikePil) {
  // libjpeg warns "Corrupt JPEG data: 3 extraneous bytes before marker" and decodes normally;
  // PIL ignores the warning, so we must too (and get the same pixels).
  std::vector<uint8_t> jpg = read_bytes(path("rgb_420.jpg"));
  ASSERT_EQ(jpg[2], 0xFF);
  const size_t seg_end = 4 + ((size_t{jpg[4]} << 8) | jpg[5]);  // end of the first segment
  jpg.insert(jpg.begin() + static_cast<ptrdiff_t>(seg_end), {0x12, 0x34, 0x56});
  Image img;
  data::decode_image(jpg.data(), jpg.size(), "extraneous.jpg", img);
  const Image clean = data::decode_image_file(path("rgb_420.jpg"));
  EXPECT_EQ(img.pixels, clean.pixels);

  // A fatal error after that warning must still fail (TurboJPEG then reports TJERR_WARNING with
  // the fatal message): corrupt the first component id of the SOS header.
  size_t sos = 0;
  for (size_t i = 2; i + 1 < jpg.size(); ++i) {
    if (jpg[i] == 0xFF && jpg[i + 1] == 0xDA) {
      sos = i;
      break;
    }
  }
  ASSERT_GT(sos, 0u);
  jpg[sos + 5] = 0x7F;
  EXPECT_THROW(data::decode_image(jpg.data(), jpg.size(), "extraneous_bad_sos.jpg", img), Error);
  // ...and the next decode on this thread works again.
  data::decode_image_file(path("rgb_420.jpg"));
}

/// CRC-32 of PNG chunks (ISO 3309), to patch an IHDR.
uint32_t crc32(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return c ^ 0xFFFFFFFFu;
}

TEST_F(DecodeTest, HugeImagesAreRejectedBeforeAllocating) {
  // JPEG: patch the SOF0 frame size to 30000 x 30000 (9e8 pixels > 2^28).
  std::vector<uint8_t> jpg = read_bytes(path("rgb_444.jpg"));
  size_t sof = 0;
  for (size_t i = 2; i + 1 < jpg.size(); ++i) {
    if (jpg[i] == 0xFF && (jpg[i + 1] == 0xC0 || jpg[i + 1] == 0xC2)) {
      sof = i;
      break;
    }
  }
  ASSERT_GT(sof, 0u);
  for (size_t o : {sof + 5, sof + 7}) {  // height, width (big endian)
    jpg[o] = 30000 >> 8;
    jpg[o + 1] = 30000 & 0xFF;
  }
  Image img;
  try {
    data::decode_image(jpg.data(), jpg.size(), "huge.jpg", img);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceed"), std::string::npos) << e.what();
  }
  // PNG: patch IHDR width/height (bytes 16..23) and its CRC.
  std::vector<uint8_t> png = read_bytes(path("rgb.png"));
  for (size_t o : {size_t{16}, size_t{20}}) {
    png[o] = 0;
    png[o + 1] = 0;
    png[o + 2] = 30000 >> 8;
    png[o + 3] = 30000 & 0xFF;
  }
  const uint32_t crc = crc32(png.data() + 12, 17);
  for (int i = 0; i < 4; ++i) png[29 + i] = static_cast<uint8_t>(crc >> (24 - 8 * i));
  try {
    data::decode_image(png.data(), png.size(), "huge.png", img);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceed"), std::string::npos) << e.what();
  }
}

TEST(DecodeSniff, FormatComesFromMagicBytes) {
  const uint8_t jpg[] = {0xFF, 0xD8, 0xFF, 0xE0};
  const uint8_t png[] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  const uint8_t junk[] = {'G', 'I', 'F', '8', '9', 'a', 0, 0};
  EXPECT_EQ(data::sniff_format(jpg, sizeof(jpg)), data::ImageFormat::jpeg);
  EXPECT_EQ(data::sniff_format(png, sizeof(png)), data::ImageFormat::png);
  EXPECT_EQ(data::sniff_format(junk, sizeof(junk)), data::ImageFormat::unknown);
  EXPECT_EQ(data::sniff_format(png, 4), data::ImageFormat::unknown);
  Image img;
  EXPECT_THROW(data::decode_image(junk, sizeof(junk), "x.gif", img), Error);
}

}  // namespace
