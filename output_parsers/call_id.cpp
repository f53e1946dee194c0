// CallIdGenerator::next: 24 draws from the 62 letters and digits.
#include "output_parsers/call_id.h"

namespace flashserve::output_parsers {

std::string CallIdGenerator::next() {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng_() % 62];  // 2^64 % 62 bias: negligible
  return id;
}

}  // namespace flashserve::output_parsers
