// The mutable n-gram cache (n = 1..4) behind the context and the workspace caches.
#pragma once

#include "huge_page_allocator.h"
#include "ngram.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace lookup {

// Open addressing with linear probing over packed keys. A key with several followers owns a
// block of the follower pool: up to 32 followers sorted by token id, beyond that a small hash
// table of its own (the followers of a common token run to thousands, and a sorted array would
// make every update a long binary search and often a long memmove). Blocks come in power-of-two
// capacities recycled through per-size free lists, so adding and removing files leaves no
// per-key heap nodes behind. Views returned by find() stay valid until the next mutation.
class NgramCache {
public:
    NgramCache() { rehash(k_min_slots); }

    // Counts every n-gram whose follower sits at index >= first; its key may start earlier.
    void add(const token_t* tokens, size_t n_tokens, size_t first = 0);
    // Undoes add() with the same arguments. Returns how many n-gram occurrences were missing.
    size_t remove(const token_t* tokens, size_t n_tokens, size_t first = 0);

    void add_count(NgramKey key, token_t token, uint32_t count);
    // Returns false when the key or the follower is absent or holds fewer than `count`.
    bool remove_count(NgramKey key, token_t token, uint32_t count);

    void merge(const NgramCache& other);
    void clear();
    // Room for n_keys keys and a pool of n_pool followers without growing: a caller that knows
    // the sizes ahead skips the rehashes and knows the memory it will take.
    void reserve(size_t n_keys, size_t n_pool);
    // The slot count reserve(n_keys, ...) allocates (a power of two, at most half full).
    [[nodiscard]] static size_t slots_for(size_t n_keys);
    [[nodiscard]] static constexpr size_t slot_bytes() { return sizeof(Slot); }

    [[nodiscard]] FollowerSpan find(NgramKey key) const;
    // Starts loading the key's slot so that several look-ups overlap their cache misses.
    void prefetch(NgramKey key) const { __builtin_prefetch(m_slots.data() + home_slot(key)); }

    [[nodiscard]] size_t n_keys() const { return m_n_keys; }
    [[nodiscard]] size_t n_followers() const { return m_n_followers; }
    [[nodiscard]] uint64_t total_count() const { return m_total_count; }
    [[nodiscard]] size_t pool_size() const { return m_pool.size(); }  // followers, freed blocks included
    [[nodiscard]] size_t memory_bytes() const;

    // Visits every (key, followers) pair in slot order.
    template <class Visit>
    void for_each(Visit&& visit) const {
        for (const Slot& slot : m_slots) {
            if (slot.key.lo != k_empty_lo) visit(slot.key, span_of(slot));
        }
    }

private:
    // Key and follower statistics share one 32-byte slot, so a lookup that the drafter's
    // precheck rejects touches a single cache line. Most keys (long n-grams above all) have one
    // follower; it lives in the slot itself, which spares the pool a block and a cache miss.
    struct alignas(32) Slot {
        NgramKey key;        // key.lo == k_empty_lo marks a free slot
        uint32_t size_cap;   // followers (bits 0..26), log2 of the pool block's capacity (27..31)
        uint32_t sum;        // total count (a workspace never holds 2^32 tokens)
        Follower head;       // one follower: that follower. More: token = index of the block in
                             // m_pool, count = an upper bound of the largest count (exact for
                             // up to k_exact_max_size followers), for the drafter's precheck.

        [[nodiscard]] uint32_t size() const { return size_cap & k_size_mask; }
        [[nodiscard]] uint32_t cap_log2() const { return size_cap >> k_size_bits; }
        [[nodiscard]] uint32_t begin() const { return static_cast<uint32_t>(head.token); }
        void set(uint32_t size, uint32_t cap_log2) { size_cap = size | (cap_log2 << k_size_bits); }
    };
    static constexpr int k_size_bits = 27;
    static constexpr uint32_t k_size_mask = (1u << k_size_bits) - 1;
    static_assert(sizeof(Slot) == 32 && std::is_trivially_copyable_v<Slot>);

    static constexpr size_t k_min_slots = 64;
    static constexpr uint32_t k_exact_max_size = 64;

    [[nodiscard]] size_t home_slot(NgramKey key) const { return hash_key(key) & m_mask; }
    [[nodiscard]] size_t find_slot(NgramKey key) const;  // m_slots.size() if absent
    static constexpr uint32_t k_sorted_max_log2 = 5;  // sorted blocks hold up to 32 followers
    static constexpr uint32_t k_unhash_size = 16;     // a hashed block this small is sorted again

    [[nodiscard]] static bool is_hashed(const Slot& slot) { return slot.cap_log2() > k_sorted_max_log2; }
    [[nodiscard]] FollowerSpan span_of(const Slot& slot) const {
        if (slot.size() == 1) return {&slot.head, 1, slot.sum, slot.head.count, true};
        if (is_hashed(slot)) {
            return {m_pool.data() + slot.begin(), 1u << slot.cap_log2(), slot.sum, slot.head.count, false};
        }
        return {m_pool.data() + slot.begin(), slot.size(), slot.sum, slot.head.count, true};
    }
    size_t insert_slot(NgramKey key);
    void erase_slot(size_t slot);
    void rehash(size_t n_slots);

    uint32_t allocate_block(uint32_t cap_log2);
    void release_block(uint32_t begin, uint32_t cap_log2);
    void rebuild_block(Slot& slot, uint32_t cap_log2);
    [[nodiscard]] Follower* find_follower(const Slot& slot, token_t token);
    void add_to_pool(Slot& slot, token_t token, uint32_t count);
    template <class Apply>
    void for_each_ngram(const token_t* tokens, size_t n_tokens, size_t first, Apply&& apply) const;
    void remove_from_pool(Slot& slot, Follower* it, uint32_t count);
    void erase_hashed(const Slot& slot, Follower* it);

    std::vector<Slot, HugePageAllocator<Slot>> m_slots;
    std::vector<Follower, HugePageAllocator<Follower>> m_pool;  // every multi-follower key's block
    std::array<std::vector<uint32_t>, 32> m_free_blocks;  // by cap_log2
    size_t m_mask = 0;
    size_t m_n_keys = 0;
    size_t m_n_followers = 0;
    uint64_t m_total_count = 0;
};

}  // namespace lookup
