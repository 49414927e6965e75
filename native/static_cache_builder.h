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

    // The counted entries of another builder, as take_entries() handed them out: a partial
    // result of a distributed build. Counts add up (saturating), so the file written after any
    // grouping of documents into builders and any order of merging is the same.
    // check_entries() must have accepted them.
    void add_entries(const uint64_t* words, const uint32_t* counts, size_t n);
    // Every entry counted so far: packed (t0, t1, follower) words, ascending and distinct, with
    // their counts. The builder keeps no entries afterwards (n_tokens stays).
    void take_entries(std::vector<uint64_t>* words, std::vector<uint32_t>* counts);

    // Writes to `path` through a temporary file in the same folder and a rename, so readers
    // never see a partial file. On failure returns false with a one-line reason.
    bool write(const std::string& path, uint64_t tokenizer_fingerprint, StaticHeader* written,
               std::string* error);

    [[nodiscard]] uint64_t n_tokens() const { return m_n_tokens; }
    [[nodiscard]] size_t memory_bytes() const;

private:
    void flush(const uint64_t* more_words = nullptr, const uint32_t* more_counts = nullptr, size_t n_more = 0);
    [[nodiscard]] size_t pending_limit() const;

    uint32_t m_n_vocab;
    uint64_t m_n_tokens = 0;
    std::vector<uint64_t> m_pending;  // packed occurrences, unsorted
    std::vector<std::pair<uint64_t, uint64_t>> m_pending_counted;  // (packed, count), from imports
    std::vector<uint64_t> m_entries;         // packed, sorted, unique
    std::vector<uint32_t> m_counts;          // per entry
};

// Whether entries from outside (another process or machine) are what take_entries() makes:
// words strictly ascending, every token below n_vocab, counts above zero. On failure returns
// false with a one-line reason.
bool check_entries(const uint64_t* words, const uint32_t* counts, size_t n, uint32_t n_vocab,
                   std::string* error);

}  // namespace lookup
