// Philox4x32-10 against the published known-answer vectors of the Random123 distribution.
#include <gtest/gtest.h>

#include "core/philox.h"

namespace flashserve {
namespace {

void expect_kat(Philox4x32 ctr, uint32_t k0, uint32_t k1, Philox4x32 want) {
  Philox4x32 got = philox4x32_10(ctr, k0, k1);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], want.v[i]) << "word " << i;
}

TEST(Philox, KnownAnswers) {
  expect_kat({{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}});
  expect_kat({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu,
             {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}});
  expect_kat({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u,
             {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}});
}

TEST(Philox, UniformRanges) {
  EXPECT_EQ(philox_uniform(0u), 0.f);
  EXPECT_LT(philox_uniform(0xffffffffu), 1.f);
  EXPECT_EQ(philox_uniform53(0u, 0u), 0.0);
  EXPECT_LT(philox_uniform53(0xffffffffu, 0xffffffffu), 1.0);
  // Different steps and seeds give different words.
  EXPECT_NE(philox_draw(7, 0).v[0], philox_draw(7, 1).v[0]);
  EXPECT_NE(philox_draw(7, 0).v[0], philox_draw(8, 0).v[0]);
}

}  // namespace
}  // namespace flashserve
