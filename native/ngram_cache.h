// The mutable n-gram cache (n = 1..4) behind the context and the workspace ("dynamic") caches.
#pragma once

#include "ngram.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace lookup {

// Open addressing with linear probing over packed keys; each key owns a block of the follower
// pool holding its followers sorted by token id. Blocks come in power-of-two capacities and are
// recycled through per-size free lists, so adding and removing files leaves no per-key heap
// nodes behind. Views returned by find() stay valid until the next mutation.
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

    [[nodiscard]] FollowerSpan find(NgramKey key) const;

    [[nodiscard]] size_t n_keys() const { return m_n_keys; }
    [[nodiscard]] size_t n_followers() const { return m_n_followers; }
    [[nodiscard]] uint64_t total_count() const { return m_total_count; }
    [[nodiscard]] size_t memory_bytes() const;

    // Visits every (key, followers) pair in slot order.
    template <class Visit>
    void for_each(Visit&& visit) const {
        for (size_t slot = 0; slot < m_keys.size(); ++slot) {
            if (m_keys[slot].lo != k_empty_lo) visit(m_keys[slot], span_of(slot));
        }
    }

private:
    struct Entry {
        uint32_t begin;     // first follower in m_pool
        uint32_t size;      // followers in use
        uint32_t cap_log2;  // block capacity is 1 << cap_log2
        uint32_t max_count;
        uint64_t sum;
    };

    static constexpr size_t k_min_slots = 64;

    [[nodiscard]] size_t home_slot(NgramKey key) const { return hash_key(key) & m_mask; }
    [[nodiscard]] size_t find_slot(NgramKey key) const;  // m_keys.size() if absent
    [[nodiscard]] FollowerSpan span_of(size_t slot) const;
    size_t insert_slot(NgramKey key);
    void erase_slot(size_t slot);
    void rehash(size_t n_slots);

    uint32_t allocate_block(uint32_t cap_log2);
    void release_block(uint32_t begin, uint32_t cap_log2);
    void grow_block(Entry& entry);

    std::vector<NgramKey> m_keys;    // per slot; lo == k_empty_lo marks a free slot
    std::vector<Entry> m_entries;    // per slot, meaningful where the key is set
    std::vector<Follower> m_pool;    // every key's follower block
    std::array<std::vector<uint32_t>, 32> m_free_blocks;  // by cap_log2
    size_t m_mask = 0;
    size_t m_n_keys = 0;
    size_t m_n_followers = 0;
    uint64_t m_total_count = 0;
};

}  // namespace lookup
