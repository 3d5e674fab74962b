// A prompt longer than policy.max_position is refused before the readout
// allocates anything that grows with its length squared (the [B, 1, L, L]
// mask of a 300k-token row would be 90 GB, a bad_alloc): the same ConfigError
// the model's forward gives.
#include <gtest/gtest.h>

#include "core/error.h"
#include "policy/model/model.h"
#include "policy/reading/readout.h"

namespace rlid::policy {
namespace {

TEST(ReadoutBounds, APromptPastMaxPositionIsRefusedBeforeTheMask) {
  ModelConfig c;
  c.ApplyPreset("tiny");
  c.num_layers = 1;
  c.vocab_size = 64;
  TransformerLM model(c);
  model->InitWeights(1);
  ReadoutRequest r;
  r.prompt.assign(300000, 5);
  r.realisations = {{{7}}, {{8}}};
  try {
    Readout(model, {r}, ReadoutOptions{});
    ADD_FAILURE() << "a 300000-token prompt was read out with max_position " << c.max_position;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds policy.max_position"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace rlid::policy
