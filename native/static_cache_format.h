// The on-disk layout of a static cache file, shared by its writer and its reader.
//
//   [header: 128 bytes]
//   [buckets: uint32 x (n_buckets + 1)]  bucket b holds records [buckets[b], buckets[b + 1])
//   [records: StaticRecord x n_keys]      grouped by bucket, ascending key inside a bucket
//   [followers: Follower x n_followers]   each key's followers, ascending token id
//
// The static-only drafting decision for each pair (its most frequent follower if the total count
// is >= 2 and it holds >= 50 %) is made once, when the file is built, and kept in the record:
// it would otherwise need a pass over all of a pair's followers at every drafting step.
// Sections start on 64-byte boundaries, each right after the one before (static_layout below):
// the counts in the header fix every offset and the file's size, which a reader checks before
// it reads any section. All integers are little-endian as written by the
// machine that built the file; byte_order_mark detects a file from a machine of the other
// endianness. The checksum covers the whole file with the checksum field read as zero.
#pragma once

#include "ngram.h"

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace lookup {

// The static-only drafting rule, baked into every file (a change needs a new format version).
inline constexpr uint32_t k_static_min_sample = 2;
inline constexpr uint32_t k_static_min_percent = 50;

inline constexpr char k_static_magic[8] = {'L', 'K', 'A', 'H', 'S', 'T', 'C', '\n'};
inline constexpr uint32_t k_static_format_version = 1;
inline constexpr uint32_t k_byte_order_mark = 0x01020304u;
inline constexpr size_t k_section_alignment = 64;
// Token ids take 21 bits in records and in the builder's packed (t0, t1, follower) words.
inline constexpr uint32_t k_static_max_vocab = 1u << 21;

struct StaticHeader {
    char magic[8];
    uint32_t format_version;
    uint32_t byte_order_mark;
    uint32_t ngram_order;  // always k_static_ngram
    uint32_t n_vocab;
    uint64_t tokenizer_fingerprint;
    uint64_t n_keys;
    uint64_t n_followers;
    uint64_t n_buckets;  // a power of two
    uint64_t total_count;
    uint64_t buckets_offset;
    uint64_t records_offset;
    uint64_t followers_offset;
    uint64_t file_size;
    uint64_t checksum;
    uint8_t reserved[24];
};
static_assert(sizeof(StaticHeader) == 128 && std::is_trivially_copyable_v<StaticHeader>);

struct StaticRecord {
    uint64_t key;   // token 0 in bits 0..20, token 1 in bits 21..41, the fallback draft + 1 in
                    // bits 42..63 (0: the static cache alone drafts nothing after this pair)
    uint64_t span;  // first follower in bits 0..39, follower count in bits 40..63
};
static_assert(sizeof(StaticRecord) == 16 && std::is_trivially_copyable_v<StaticRecord>);

inline constexpr int k_pair_token_bits = 21;
inline constexpr uint64_t k_pair_token_mask = (uint64_t{1} << k_pair_token_bits) - 1;
inline constexpr uint64_t k_pair_mask = (uint64_t{1} << (2 * k_pair_token_bits)) - 1;

inline constexpr int k_span_offset_bits = 40;
inline constexpr uint64_t k_span_offset_mask = (uint64_t{1} << k_span_offset_bits) - 1;

[[nodiscard]] inline uint64_t pack_pair(token_t t0, token_t t1) {
    return static_cast<uint64_t>(t0) | (static_cast<uint64_t>(t1) << k_pair_token_bits);
}
[[nodiscard]] inline token_t pair_token(uint64_t key, int i) {
    return static_cast<token_t>((key >> (i * k_pair_token_bits)) & k_pair_token_mask);
}
[[nodiscard]] inline uint64_t with_fallback(uint64_t pair, token_t fallback) {
    return pair | (static_cast<uint64_t>(fallback + 1) << (2 * k_pair_token_bits));
}
[[nodiscard]] inline token_t record_fallback(uint64_t key) {
    return static_cast<token_t>(key >> (2 * k_pair_token_bits)) - 1;
}

[[nodiscard]] inline uint64_t pack_span(uint64_t offset, uint64_t length) {
    return offset | (length << k_span_offset_bits);
}

// Fibonacci hashing of the token pair: the top bits of a multiply spread pairs evenly.
[[nodiscard]] inline uint64_t bucket_of(uint64_t pair, int bucket_bits) {
    return bucket_bits == 0 ? 0 : ((pair & k_pair_mask) * 0x9E3779B97F4A7C15ull) >> (64 - bucket_bits);
}

// The static-only decision for one pair, made one follower at a time in ascending token order:
// the most frequent (the lowest token id among equals), if the rule above lets it through.
class StaticFallback {
public:
    void add(token_t token, uint64_t count) {
        m_sum += count;
        if (count > m_best_count) {
            m_best_count = count;
            m_best = token;
        }
    }
    [[nodiscard]] token_t decision() const {
        const bool qualifies = m_sum >= k_static_min_sample && 100 * m_best_count >= k_static_min_percent * m_sum;
        return qualifies ? m_best : -1;
    }

private:
    uint64_t m_sum = 0;
    uint64_t m_best_count = 0;
    token_t m_best = -1;
};

[[nodiscard]] inline uint64_t align_section(uint64_t offset) {
    return (offset + k_section_alignment - 1) & ~uint64_t{k_section_alignment - 1};
}

// The most keys and followers a file may hold (record fields: 32-bit bucket bounds, 40-bit
// follower offsets), so that the layout below never overflows.
inline constexpr uint64_t k_static_max_keys = 0xFFFFFFFFull;
inline constexpr uint64_t k_static_max_followers = k_span_offset_mask;

// Where each section of a file with these counts starts and where the file ends: the one
// layout the writer produces and the reader accepts (no gaps, nothing after the followers).
// About two keys per bucket, so a look-up reads one or two cache lines of records.
struct StaticLayout {
    int bucket_bits = 0;
    uint64_t n_buckets = 1;
    uint64_t buckets_offset = 0;
    uint64_t records_offset = 0;
    uint64_t followers_offset = 0;
    uint64_t file_size = 0;
};

// Counts within k_static_max_keys and k_static_max_followers only.
[[nodiscard]] inline StaticLayout static_layout(uint64_t n_keys, uint64_t n_followers) {
    StaticLayout l;
    while ((uint64_t{1} << l.bucket_bits) * 2 < n_keys) ++l.bucket_bits;
    l.n_buckets = uint64_t{1} << l.bucket_bits;
    l.buckets_offset = align_section(sizeof(StaticHeader));
    l.records_offset = align_section(l.buckets_offset + (l.n_buckets + 1) * sizeof(uint32_t));
    l.followers_offset = align_section(l.records_offset + n_keys * sizeof(StaticRecord));
    l.file_size = l.followers_offset + n_followers * sizeof(Follower);
    return l;
}

}  // namespace lookup
