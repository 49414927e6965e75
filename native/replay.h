// llama-lookup-stats' replay: drafting measured against text whose continuation is known.
#pragma once

#include "drafter.h"

#include <cstddef>
#include <cstdint>

namespace lookup {

struct ReplayStats {
    uint64_t n_predict = 0;
    uint64_t n_drafted = 0;
    uint64_t n_accept = 0;
    uint64_t draft_ns = 0;  // drafting plus context-cache updates, as upstream times it
};

// Cuts `tokens` into chunks of n_ctx; in each, pretends to generate the chunk: draft, accept
// the drafted tokens that match, then "sample" the true next token, keeping a context cache of
// the chunk so far. After each chunk its context cache is merged into `workspace` (if given), as
// upstream does. With max_branches > 1 each step drafts a token tree instead (draft_tree) and
// keeps its longest path that matches the text, as a tree verifier would; n_drafted then counts
// every node of every tree, the tokens verification pays for.
ReplayStats replay(const token_t* tokens, size_t n_tokens, size_t n_ctx, size_t n_draft, size_t max_branches,
                   NgramCache* workspace, const StaticCache* repository);

}  // namespace lookup
