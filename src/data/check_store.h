// rn50 data: check-data for every store (see check_store.cpp).
#pragma once

#include "data/stores.h"
#include "rn50/data.h"

namespace rn50::data {

/// rn50 check-data on the dataset of `store`: ImageFolder as check_dataset (rn50/data.h);
/// other stores by reading and checking every sample of each split (opt.decode: decoding it,
/// else its header), counting samples and damaged ones per shard file (DataCheckReport::shards).
/// Never throws for a bad dataset: each problem is a DataProblem.
DataCheckReport check_store(const StoreOptions& store, const DataCheckOptions& opt = {});

}  // namespace rn50::data
