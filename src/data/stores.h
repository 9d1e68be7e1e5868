// rn50 data: which store a dataset is in, and its splits opened as SampleIndexes
// (data/sample_index.h): ImageFolder (root/train/<class>/*, root/val/<class>/*), a file list
// (PaddleClas' train_list.txt / val_list.txt, paths relative to the root), TFRecord (the
// standard ImageNet conversion's root/train-NNNNN-of-NNNNN and validation-NNNNN-of-NNNNN, DALI
// index files beside them or in an index folder) or WebDataset (root/train/*.tar and
// root/val/*.tar, or shard patterns).
#pragma once

#include <memory>
#include <string>

#include "data/sample_index.h"

namespace rn50::data {

/// The format of `opt`: its own unless automatic; then a file list when a list is given,
/// TFRecord when the root holds train-*-of-* or validation-*-of-* files, WebDataset when a
/// shard pattern is given or root/train or root/val holds .tar files, else ImageFolder.
DataFormat detect_format(const StoreOptions& opt);

/// Split `split` of the dataset of `opt` (detect_format), with `what` set to a description for
/// messages ("<root>/train", "train_list.txt", "TFRecord <root> (train)", ...). Throws
/// rn50::Error naming the flag or folder when the split is missing or unreadable.
std::shared_ptr<const SampleIndex> open_split(const StoreOptions& opt, Split split,
                                              std::string* what);

/// Whether split `split` exists in the dataset of `opt` (its folder, list or shards).
bool has_split(const StoreOptions& opt, Split split);

}  // namespace rn50::data
