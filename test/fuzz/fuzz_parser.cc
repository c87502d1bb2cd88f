// libFuzzer target for the frame parser (built by scripts/test.sh with
// clang when it is available): coverage-guided, under ASan and UBSan.
#include <cstdlib>

#include "fuzz/frame_invariants.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mrc::wire::Packet p;
  if (mrc::wire::parse_frame({data, size}, p) == mrc::wire::ParseError::ok &&
      mrc::test::accepted_packet_violation({data, size}, p))
    std::abort();
  mrc::wire::Packet q;
  mrc::wire::parse_frame({data, size}, q, {.verify_icrc = false});
  return 0;
}
