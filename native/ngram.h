// Token ids, packed n-gram keys and follower records shared by every cache.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace lookup {

using token_t = int32_t;

inline constexpr int k_ngram_min = 1;
inline constexpr int k_ngram_max = 4;
inline constexpr int k_static_ngram = 2;

// Up to four token ids packed into two words. Unused trailing slots hold k_no_token, so keys of
// different sizes never compare equal and the size is implied by the key itself. Slot 0 always
// holds a real token, which makes lo == k_empty_lo free to mark an empty hash-table slot.
struct NgramKey {
    uint64_t lo;  // token 0 in bits 0..31, token 1 in bits 32..63
    uint64_t hi;  // token 2 in bits 0..31, token 3 in bits 32..63

    friend bool operator==(NgramKey a, NgramKey b) { return a.lo == b.lo && a.hi == b.hi; }
    friend bool operator!=(NgramKey a, NgramKey b) { return !(a == b); }
    friend bool operator<(NgramKey a, NgramKey b);
};
static_assert(std::is_trivially_copyable_v<NgramKey>);

inline constexpr uint32_t k_no_token = 0xFFFFFFFFu;
inline constexpr uint64_t k_empty_lo = ~uint64_t{0};

// n is 1..4. Built from words rather than from a padded array: storing the array and reading
// it back as words stalls store forwarding, which made this the most expensive step of a scan.
[[nodiscard]] inline NgramKey make_key(const token_t* tokens, int n) {
    const auto word = [](uint32_t a, uint32_t b) { return a | (uint64_t{b} << 32); };
    const auto at = [tokens](int i) { return static_cast<uint32_t>(tokens[i]); };
    switch (n) {
        case 1: return {word(at(0), k_no_token), word(k_no_token, k_no_token)};
        case 2: return {word(at(0), at(1)), word(k_no_token, k_no_token)};
        case 3: return {word(at(0), at(1)), word(at(2), k_no_token)};
        default: return {word(at(0), at(1)), word(at(2), at(3))};
    }
}

[[nodiscard]] inline token_t key_token(NgramKey key, int i) {
    const uint64_t word = i < 2 ? key.lo : key.hi;
    return static_cast<token_t>(static_cast<uint32_t>(word >> (32 * (i & 1))));
}

[[nodiscard]] inline int key_size(NgramKey key) {
    int n = 1;
    while (n < 4 && static_cast<uint32_t>(key_token(key, n)) != k_no_token) ++n;
    return n;
}

// Keys order as their padded token tuples with the padding (-1) lowest, i.e. (a) < (a, b).
inline bool operator<(NgramKey a, NgramKey b) {
    for (int i = 0; i < 4; ++i) {
        const token_t x = key_token(a, i), y = key_token(b, i);
        if (x != y) return x < y;
    }
    return false;
}

// One multiply-xorshift pass over both words: every token position changes the hash (upstream
// XORed per-token hashes, so (a, b) and (b, a) collided and repeated tokens cancelled out).
[[nodiscard]] inline uint64_t hash_key(NgramKey key) {
    uint64_t h = key.lo * 0x9E3779B97F4A7C15ull;
    h ^= key.hi + 0x632BE59BD9B4E019ull + (h >> 29);
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 32);
}

struct Follower {
    token_t token;
    uint32_t count;
};
static_assert(sizeof(Follower) == 8 && std::is_trivially_copyable_v<Follower>);

// A read-only view of one key's followers. A sorted span holds them in ascending token order;
// a hashed one (a key with very many followers) holds them in hash order with holes, entries
// whose count is 0, that every reader skips. `sum` is the total count and `max_count` at least
// the largest single count: together they let the drafter reject a key before scoring any
// follower.
struct FollowerSpan {
    const Follower* data = nullptr;
    uint32_t size = 0;  // entries in data, holes included
    uint64_t sum = 0;
    uint32_t max_count = 0;
    bool sorted = true;

    [[nodiscard]] bool empty() const { return size == 0; }
    [[nodiscard]] const Follower* begin() const { return data; }
    [[nodiscard]] const Follower* end() const { return data + size; }
};

// The followers of a span in ascending token order, holes left out (for export and tests, not
// for hot paths: it allocates).
[[nodiscard]] inline std::vector<Follower> sorted_followers(const FollowerSpan& span) {
    std::vector<Follower> out;
    out.reserve(span.size);
    for (const Follower& f : span) {
        if (f.count > 0) out.push_back(f);
    }
    if (!span.sorted) {
        std::sort(out.begin(), out.end(), [](const Follower& a, const Follower& b) { return a.token < b.token; });
    }
    return out;
}

}  // namespace lookup
