// rn50 data: POSIX tar archives (ustar, as GNU tar and Python's tarfile write them, with GNU
// long-name records and pax path headers), as WebDataset stores samples: consecutive members
// sharing a key (the path up to the first '.' of the base name) form a sample, e.g.
// n01440764/x.jpg + n01440764/x.cls; .jpg/.jpeg/.png is the image, .cls the class as ASCII
// decimal. Sources: POSIX.1-2001 (ustar, pax), GNU tar's manual (the 'L' record), WebDataset's
// specification (github.com/webdataset/webdataset, "The WebDataset Format").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/sample_index.h"

namespace rn50::data {

/// A regular-file member: its path, and where its data is in the archive.
struct TarMember {
  std::string name;
  int64_t data_offset = 0;
  int64_t size = 0;
  int64_t header_offset = 0;
};

/// The regular-file members of tar file `path`, reading headers only. A header whose checksum
/// fails or whose size runs past the file is reported in `problems` ("path@offset: ...") and
/// the scan goes on from the next 512-byte block that holds a valid header. Throws rn50::Error
/// naming the file when it cannot be read.
std::vector<TarMember> scan_tar(const std::string& path, std::vector<std::string>* problems);

/// Appends a regular-file member `name` holding `data` to `out` (ustar; a name of over 100
/// bytes is split into prefix/name, or written in a GNU 'L' record when it cannot be).
void append_tar_member(std::string& out, const std::string& name, std::string_view data);
/// Appends the two zero blocks that end an archive.
void finish_tar(std::string& out);

/// The shard files a spec names: a folder (its *.tar files, sorted), a brace range
/// ("imagenet-train-{000000..001281}.tar": every number of the range, zero-padded as written),
/// or one file. Throws rn50::Error naming the spec when it names no file or a file is missing.
std::vector<std::string> expand_shards(const std::string& spec);

/// WebDataset samples in `shards` (in that order). Classes: manifest.json in `manifest_dir`
/// (or its parent; rn50 convert-data writes it), else max label + 1 named "class_<i>". A member
/// group without an image or a .cls, an unparsable .cls or a damaged header is read as a bad
/// sample, named "shard:member" or "shard@offset".
std::shared_ptr<const SampleIndex> webdataset_samples(const std::vector<std::string>& shards,
                                                      const std::string& manifest_dir);

}  // namespace rn50::data
