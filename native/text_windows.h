// The windows of a file's text that retrieval (workspace/retrieval.py) searches for code like the
// lines above the cursor: the text cut into blocks of `block_lines` lines, window w being blocks w
// and w + 1, each block known by the distinct terms of its lines, and a query's Jaccard
// similarity to every window.
//
// A term is a piece of an identifier (a run of ASCII letters, digits and `_`; any other byte,
// UTF-8's included, separates them, and `\n` ends a line) cut at each `_` and where a lowercase
// letter meets an uppercase one, lowercased, of at least 3 characters: `tick_init_highres` and
// `tickInitHighres` are tick, init and highres, `HTTPServer` is httpserver, `fd` none. Code that
// calls the neighbours of a name (`tick_setup_sched_timer` beside `tick_init_highres`) then looks
// like it, which whole identifiers would not tell. Terms are kept as 64-bit hashes in one flat
// array per file: a Python dict of a file's words and the blocks each is in was most of a first
// request's time to build, and thousands of objects for the garbage collector to walk. Two
// distinct terms of one text share a hash with odds of about one in 2^64 per pair: at worst one
// window looks a little more alike than it is.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace lookup {

using TermHash = uint64_t;

// The distinct terms of text that start with a letter (not a number's) and are not in
// `left_out` (sorted): sorted hashes, a query.
std::vector<TermHash> query_terms(std::string_view text, const std::vector<TermHash>& left_out);

// Blocks as compressed rows: block b's terms (sorted, distinct, none of `left_out`; those of
// numbers included, which count in a window's size) are terms[starts[b], starts[b + 1]).
struct TextWindows {
    std::vector<uint32_t> starts;
    std::vector<TermHash> terms;
    std::vector<uint32_t> sizes;  // distinct terms of each window

    [[nodiscard]] size_t blocks() const { return starts.empty() ? 0 : starts.size() - 1; }
    [[nodiscard]] size_t windows() const { return sizes.size(); }
};

// Lines are text split at `\n` (L of them: one more than its newlines); ceil(L / block_lines)
// blocks and max(1, ceil((L - block_lines) / block_lines)) windows, the last block of the last
// window empty where the text has only one block. block_lines >= 1.
TextWindows text_windows(std::string_view text, uint32_t block_lines, const std::vector<TermHash>& left_out);

// out[w]: |query & window w| / |query | window w| for every window (0 for an empty query).
// query: sorted, distinct (as query_terms returns it).
void window_similarities(const TextWindows& windows, const TermHash* query, size_t query_size, double* out);

}  // namespace lookup
