#include "replay.h"

#include <chrono>
#include <vector>

namespace lookup {

namespace {

using Clock = std::chrono::steady_clock;

[[nodiscard]] uint64_t elapsed_ns(Clock::time_point since) {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - since).count());
}

}  // namespace

ReplayStats replay(const token_t* tokens, size_t n_tokens, size_t n_ctx, size_t n_draft,
                   NgramCache* dynamic, const StaticCache* static_cache) {
    ReplayStats stats;
    if (n_ctx == 0) return stats;
    stats.n_predict = n_tokens - n_tokens % n_ctx;
    NgramCache context;
    const DraftSources sources{&context, dynamic, static_cache};
    std::vector<token_t> drafted(n_draft);
    for (size_t start = 0; start + n_ctx < n_tokens; start += n_ctx) {
        const token_t* chunk = tokens + start;
        // The chunk is its own "output": position `done` is how far generation has got.
        size_t done = 1;
        // One clock interval per chunk: upstream times each draft and each cache update
        // separately, and on this scale the clock calls themselves would be a tenth of the cost.
        // The untimed remainder (token comparisons) is negligible either way.
        const Clock::time_point start_chunk = Clock::now();
        while (done < n_ctx) {
            const size_t n = draft(chunk, done, sources, n_draft, drafted.data());
            stats.n_drafted += n;
            for (size_t j = 0; j < n && done < n_ctx && drafted[j] == chunk[done]; ++j) {
                ++stats.n_accept;
                ++done;
                context.add(chunk, done, done - 1);
            }
            if (done < n_ctx) {
                ++done;
                context.add(chunk, done, done - 1);
            }
        }
        stats.draft_ns += elapsed_ns(start_chunk);
        if (dynamic != nullptr) dynamic->merge(context);
        context.clear();
    }
    return stats;
}

}  // namespace lookup
