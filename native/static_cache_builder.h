// Counts the 2-grams of many documents and writes them as a static cache file.
#pragma once

#include "ngram.h"
#include "static_cache_format.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lookup {

// Each occurrence is packed as one word (t0, t1, follower: 21 bits each) and appended to a
// pending buffer; when it holds a quarter as many words as there are unique entries, it is
// sorted and merged into the sorted run of unique words with counts. Peak memory stays near
// twice the unique entries' 12 bytes (a hash map of maps, as upstream uses, needs ~20x the
// final file).
class StaticCacheBuilder {
public:
    explicit StaticCacheBuilder(uint32_t n_vocab) : m_n_vocab(n_vocab) {}

    // One document: no 2-gram spans two calls. Tokens must be < n_vocab (checked by callers).
    void add(const token_t* tokens, size_t n_tokens);
    void add_count(token_t t0, token_t t1, token_t follower, uint64_t count);

    // Writes to `path` through a temporary file in the same folder and a rename, so readers
    // never see a partial file. On failure returns false with a one-line reason.
    bool write(const std::string& path, uint64_t tokenizer_fingerprint, StaticHeader* written,
               std::string* error);

    [[nodiscard]] uint64_t n_tokens() const { return m_n_tokens; }
    [[nodiscard]] size_t memory_bytes() const;

private:
    void flush();
    [[nodiscard]] size_t pending_limit() const;

    uint32_t m_n_vocab;
    uint64_t m_n_tokens = 0;
    std::vector<uint64_t> m_pending;  // packed occurrences, unsorted
    std::vector<std::pair<uint64_t, uint64_t>> m_pending_counted;  // (packed, count), from imports
    std::vector<uint64_t> m_entries;         // packed, sorted, unique
    std::vector<uint32_t> m_counts;          // per entry
};

}  // namespace lookup
