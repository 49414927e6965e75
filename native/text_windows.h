// The windows of a file's text that retrieval (workspace/retrieval.py) searches for code like the
// lines above the cursor: the text cut into blocks of `block_lines` lines, window w being blocks w
// and w + 1, each block known by the distinct words of its lines, and a query's Jaccard
// similarity to every window. A word is a run of ASCII letters, digits and `_` (any other byte,
// UTF-8's included, separates words; `\n` ends a line). Words are kept as 64-bit hashes in one
// flat array per file: a Python dict of a file's words and the blocks each is in was most of a
// first request's time to build, and thousands of objects for the garbage collector to walk.
// Two distinct words of one text share a hash with odds of about one in 2^64 per pair: at
// worst one window looks a little more alike than it is.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace lookup {

using WordHash = uint64_t;

WordHash word_hash(std::string_view word);

// The distinct words of text that start with a letter or `_` and are not in `left_out` (sorted,
// distinct hashes: a query), sorted.
std::vector<WordHash> query_words(std::string_view text, const std::vector<WordHash>& left_out);

// Blocks as compressed rows: block b's words (sorted, distinct, none of `left_out`; numbers
// included, which count in a window's size) are words[starts[b], starts[b + 1]).
struct TextWindows {
    std::vector<uint32_t> starts;
    std::vector<WordHash> words;
    std::vector<uint32_t> sizes;  // distinct words of each window

    [[nodiscard]] size_t blocks() const { return starts.empty() ? 0 : starts.size() - 1; }
    [[nodiscard]] size_t windows() const { return sizes.size(); }
};

// Lines are text split at `\n` (L of them: one more than its newlines); ceil(L / block_lines)
// blocks and max(1, ceil((L - block_lines) / block_lines)) windows, the last block of the last
// window empty where the text has only one block. block_lines >= 1.
TextWindows text_windows(std::string_view text, uint32_t block_lines, const std::vector<WordHash>& left_out);

// out[w]: |query & window w| / |query | window w| for every window (0 for an empty query).
// query: sorted, distinct (as query_words returns it).
void window_similarities(const TextWindows& windows, const WordHash* query, size_t query_size, double* out);

}  // namespace lookup
