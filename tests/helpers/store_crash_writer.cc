// Writer process for the store crash test (tests/memory/crash_test.cc): writes
// canonical episodes through a memory::Writer as fast as it can and prints
// "committed ID" after each Flush() returns, i.e. once every episode up to ID
// is durable. The test SIGKILLs it at random moments and checks the database.
//   store_crash_writer DB_PATH EPISODES_PER_FLUSH MAX_EPISODES
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "core/error.h"
#include "memory/store.h"
#include "memory/writer.h"
#include "tests/memory/fixtures.h"

int main(int argc, char** argv) {
  using namespace rlid::memory;
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s DB_PATH EPISODES_PER_FLUSH MAX_EPISODES\n", argv[0]);
    return 2;
  }
  try {
    const int per_flush = std::atoi(argv[2]);
    const int max_episodes = std::atoi(argv[3]);
    auto store = Store::Open(argv[1], Store::Mode::kReadWrite);
    Writer writer(*store);
    RunRecord run;
    run.name = "crash";
    run.kind = "train";
    const int64_t run_id = writer.BeginRun(run);
    std::printf("ready\n");
    std::fflush(stdout);
    int64_t previous_item = 0;
    for (int i = 1; i <= max_episodes; ++i) {
      const int64_t id = store->NewEpisodeId();
      const int64_t item = store->item_ids().Next();
      writer.Submit(testing::CanonicalEpisode(id, run_id, item, previous_item));
      previous_item = item;
      if (i % per_flush == 0) {
        writer.Flush();
        std::printf("committed %lld\n", static_cast<long long>(id));
        std::fflush(stdout);
      }
    }
    writer.EndRun(run_id, "completed");
    std::printf("done\n");
    return 0;
  } catch (const rlid::Error& e) {
    std::fprintf(stderr, "%s\n", rlid::FormatError(e).c_str());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 4;
  }
}
