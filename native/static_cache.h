// The read-only static cache of 2-grams.
#pragma once

#include "file_bytes.h"
#include "ngram.h"
#include "static_cache_format.h"

#include <cstdint>
#include <optional>
#include <string>

namespace lookup {

// open() reads the file into private memory (its size) and checks the header; nothing done to
// the file afterwards reaches what was read, and changed_on_disk() tells when it was replaced
// or rewritten. verify() checks the copy once (checksum and structure). find() trusts nothing it
// reads: a corrupt bucket or span yields "no followers", never a read outside the copy.
class StaticCache {
public:
    // Without an expected vocabulary size or fingerprint, that check is skipped. On failure
    // returns false and sets `error` to a one-line reason (without the path).
    bool open(const std::string& path, std::optional<uint32_t> expected_vocab,
              std::optional<uint64_t> expected_fingerprint, std::string* error);
    bool verify(std::string* error);
    void close();

    [[nodiscard]] bool is_open() const { return m_open; }
    [[nodiscard]] bool verified() const { return m_verified; }
    [[nodiscard]] const StaticHeader& header() const { return m_header; }
    // Whether the path opened now names another file or one modified since (or nothing): a
    // stat, no reading.
    [[nodiscard]] bool changed_on_disk() const;

    // A pair's followers and the token the static cache alone drafts after it (-1: none).
    struct Entry {
        FollowerSpan followers;
        token_t fallback = -1;
    };
    [[nodiscard]] Entry find(token_t t0, token_t t1) const;
    // Starts loading the pair's bucket; find() for the same pair follows soon.
    void prefetch(token_t t0, token_t t1) const {
        __builtin_prefetch(m_buckets + bucket_of(pack_pair(t0, t1), m_bucket_bits));
    }

    // Visits every (t0, t1, followers) in file order; only meaningful after verify().
    template <class Visit>
    void for_each(Visit&& visit) const {
        for (uint64_t i = 0; i < m_header.n_keys; ++i) {
            const StaticRecord& r = m_records[i];
            visit(pair_token(r.key, 0), pair_token(r.key, 1), span_at(r.span));
        }
    }

private:
    [[nodiscard]] FollowerSpan span_at(uint64_t span) const;

    FileBytes m_file;
    std::string m_path;
    StaticHeader m_header{};  // a copy: checked once, then read without re-checking
    bool m_open = false;
    const uint32_t* m_buckets = nullptr;
    const StaticRecord* m_records = nullptr;
    const Follower* m_followers = nullptr;
    int m_bucket_bits = 0;
    bool m_verified = false;
};

}  // namespace lookup
