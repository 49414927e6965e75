// Drafting: the tokens the caches predict next, with llama.cpp's lookup decisions.
#pragma once

#include "ngram.h"
#include "ngram_cache.h"
#include "static_cache.h"
#include "workspace_layers.h"

#include <cstddef>
#include <cstdint>

namespace lookup {

// Which cache decided a drafted token: the request's own text (context), the workspace's
// files, kept current as they change (workspace), or a repository's static cache file
// built ahead (repository). The values are the ids Python sees (lookahead_lsp._lookup.DraftSource).
enum class DraftSource : uint8_t { context = 0, workspace = 1, repository = 2 };

// The caches one drafting call reads, one per DraftSource. Any may be null; the repository
// cache must have been verified.
struct DraftCaches {
    const NgramCache* context = nullptr;
    WorkspaceLayers workspace;
    const StaticCache* repository = nullptr;
};

// Per n-gram size (index n - 1): a key qualifies when its followers' total count reaches
// min_sample and the chosen follower holds at least min_percent of it.
struct DraftThresholds {
    uint32_t min_sample[k_ngram_max];
    uint32_t min_percent[k_ngram_max];
};

inline constexpr DraftThresholds k_context_thresholds{{2, 2, 1, 1}, {66, 50, 50, 50}};  // "lax"
inline constexpr DraftThresholds k_workspace_thresholds{{4, 3, 2, 2}, {75, 66, 66, 66}};  // "strict"
// A follower also seen after the same 2 tokens in the static cache has its count multiplied
// by this times its count there.
inline constexpr uint64_t k_repository_weight = 100;

// Why a token was drafted: the deciding cache, the n-gram size of its key, the chosen
// follower's raw count and the key's total count. Callers calibrate acceptance on these.
struct DraftEvidence {
    token_t token = -1;
    DraftSource source = DraftSource::context;
    uint8_t ngram = 0;
    uint32_t count = 0;
    uint64_t sum = 0;
};

// Drafts up to n_draft tokens following known[0..n_known) into out. Decisions:
//  1. context cache, n = 4..1, lax thresholds; 2. workspace cache, n = 4..1, strict thresholds;
//     followers scored count x (100 x repository count, or 1 if absent from the repository
//     followers of the last two tokens), in 64-bit arithmetic;
//  3. static cache alone on the last two tokens: its most frequent follower, if the total is
//     >= 2 and it holds >= 50 % (decided when the file was built, see static_cache_format.h).
// Score ties go to the lowest token id. Sizes longer than the sequence are skipped; fewer than
// two known tokens draft nothing (as upstream). Returns the number of tokens drafted; evidence,
// if not null, receives one entry per drafted token.
size_t draft(const token_t* known, size_t n_known, const DraftCaches& sources, size_t n_draft,
             token_t* out, DraftEvidence* evidence = nullptr);

// A token tree of up to max_branches branches. Branch 0 is exactly draft(). Then, depth by depth
// along branch 0, every other token that qualifies at that depth (see next_candidates in
// drafter.cpp) starts a branch that continues greedily: alternatives near the root come first,
// as they leave the longest continuations. Node i has parent parents[i] (-1: a child of the last
// known token); parents precede children, and a branch's nodes are contiguous. Writes at most
// max_branches * n_draft nodes and returns the number written; evidence, if not null, receives
// each node's decision (a branch's first node: the key that offered it as an alternative).
size_t draft_tree(const token_t* known, size_t n_known, const DraftCaches& sources, size_t n_draft,
                  size_t max_branches, token_t* out_tokens, int32_t* out_parents,
                  DraftEvidence* evidence = nullptr);

}  // namespace lookup
