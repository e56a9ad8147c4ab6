// The work-splitting functions depend on shape only; these pin down their contract.
#include "../../runtime/parallel/partition.hpp"

#include <gtest/gtest.h>

namespace attend::parallel {
namespace {

TEST(Partition, PrefillIsNotSplit) {
  EXPECT_EQ(split_keys(100000, 2, 1, 32).count, 1);
  EXPECT_EQ(split_keys(100000, 2, 1, 32).keys, 100000);
}

TEST(Partition, ShortDecodeIsNotSplit) {
  EXPECT_EQ(split_keys(1023, 1, 1, 32).count, 1);
  EXPECT_EQ(split_keys(1, 1, 1, 32).count, 1);
}

TEST(Partition, DecodeSplitsOnlyUpToTheTargetItemCount) {
  EXPECT_EQ(split_keys(4096, 1, 32, 32).count, 1);  // 32 (batch, kv head) pairs are enough
  EXPECT_EQ(split_keys(4096, 1, 40, 32).count, 1);
  const KeySplit s = split_keys(4096, 1, 8, 32);  // 8 pairs: 4 ranges of 1024
  EXPECT_EQ(s.count, 4);
  EXPECT_EQ(s.keys, 1024);
  EXPECT_EQ(split_keys(4096, 1, 3, 32).count, 8);      // 11 wanted, at most 4096 / 512
  EXPECT_EQ(split_keys(1 << 20, 1, 1, 32).count, 16);  // at most 16
}

TEST(Partition, DecodeSplitsCoverAllKeysAligned) {
  for (int64_t nk : {1024, 1100, 4096, 4097, 16384, 1 << 20}) {
    const KeySplit s = split_keys(nk, 1, 1, 32);
    EXPECT_GE(s.count, 2) << nk;
    EXPECT_LE(s.count, 16) << nk;
    EXPECT_EQ(s.keys % 256, 0) << nk;
    EXPECT_GE(s.count * s.keys, nk) << nk;
    EXPECT_LT((s.count - 1) * s.keys, nk) << "an empty last split for " << nk;
  }
}

TEST(Partition, RowBlocks) {
  EXPECT_EQ(row_blocks(64, 64), 1);
  EXPECT_EQ(row_blocks(65, 64), 2);
  EXPECT_EQ(row_blocks(1, 64), 1);
  EXPECT_EQ(row_blocks(0, 64), 0);
}

}  // namespace
}  // namespace attend::parallel
