#include "replay.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace lookup {

namespace {

using Clock = std::chrono::steady_clock;

[[nodiscard]] uint64_t elapsed_ns(Clock::time_point since) {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - since).count());
}

// Writes the draft to verify at this step into out and returns its length: draft() itself, or
// with a token tree the path to its deepest node that matches the text (what a tree verifier
// accepts), with n_nodes set to the whole tree's size, which is what verifying it costs.
size_t draft_step(const token_t* chunk, size_t done, size_t n_ctx, const DraftCaches& sources, size_t n_draft,
                  size_t max_branches, std::vector<token_t>& tree, std::vector<int32_t>& parents,
                  std::vector<uint32_t>& depth, token_t* out, size_t* n_nodes) {
    if (max_branches <= 1) return *n_nodes = draft(chunk, done, sources, n_draft, out);
    *n_nodes = draft_tree(chunk, done, sources, n_draft, max_branches, tree.data(), parents.data());
    // depth[i] + 1 for a node whose whole path matches the text, 0 otherwise.
    int64_t best = -1;
    for (size_t i = 0; i < *n_nodes; ++i) {
        const int32_t p = parents[i];
        const uint32_t d = p < 0 ? 0 : depth[static_cast<size_t>(p)];
        const bool parent_matches = p < 0 || depth[static_cast<size_t>(p)] > 0;
        const bool matches = parent_matches && done + d < n_ctx && tree[i] == chunk[done + d];
        depth[i] = matches ? d + 1 : 0;
        if (matches && (best < 0 || depth[i] > depth[static_cast<size_t>(best)])) best = static_cast<int64_t>(i);
    }
    if (best < 0) return 0;
    const size_t length = depth[static_cast<size_t>(best)];
    for (int64_t i = best; i >= 0; i = parents[static_cast<size_t>(i)]) out[depth[static_cast<size_t>(i)] - 1] = tree[static_cast<size_t>(i)];
    return length;
}

}  // namespace

ReplayStats replay(const token_t* tokens, size_t n_tokens, size_t n_ctx, size_t n_draft, size_t max_branches,
                   NgramCache* workspace, const StaticCache* repository) {
    ReplayStats stats;
    if (n_ctx == 0) return stats;
    stats.n_predict = n_tokens - n_tokens % n_ctx;
    NgramCache context;
    const DraftCaches sources{&context, WorkspaceLayers{workspace, nullptr, nullptr}, repository};
    std::vector<token_t> drafted(n_draft);
    std::vector<token_t> tree(n_draft * max_branches);
    std::vector<int32_t> parents(n_draft * max_branches);
    std::vector<uint32_t> depth(n_draft * max_branches);
    for (size_t start = 0; start + n_ctx < n_tokens; start += n_ctx) {
        const token_t* chunk = tokens + start;
        // The chunk is its own "output": position `done` is how far generation has got.
        size_t done = 1;
        // One clock interval per chunk: upstream times each draft and each cache update
        // separately, and on this scale the clock calls themselves would be a tenth of the cost.
        // The untimed remainder (token comparisons) is negligible either way.
        const Clock::time_point start_chunk = Clock::now();
        while (done < n_ctx) {
            size_t n_nodes = 0;
            const size_t n = draft_step(chunk, done, n_ctx, sources, n_draft, max_branches, tree, parents, depth,
                                        drafted.data(), &n_nodes);
            stats.n_drafted += n_nodes;
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
        if (workspace != nullptr) workspace->merge(context);
        context.clear();
    }
    return stats;
}

}  // namespace lookup
