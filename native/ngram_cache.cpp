#include "ngram_cache.h"

#include <algorithm>
#include <cstring>

namespace lookup {

namespace {

[[nodiscard]] Follower* lower_bound_token(Follower* first, Follower* last, token_t token) {
    return std::lower_bound(first, last, token,
                            [](const Follower& f, token_t t) { return f.token < t; });
}

}  // namespace

size_t NgramCache::find_slot(NgramKey key) const {
    for (size_t slot = home_slot(key);; slot = (slot + 1) & m_mask) {
        if (m_keys[slot] == key) return slot;
        if (m_keys[slot].lo == k_empty_lo) return m_keys.size();
    }
}

FollowerSpan NgramCache::span_of(size_t slot) const {
    const Entry& e = m_entries[slot];
    return {m_pool.data() + e.begin, e.size, e.sum, e.max_count};
}

FollowerSpan NgramCache::find(NgramKey key) const {
    const size_t slot = find_slot(key);
    return slot == m_keys.size() ? FollowerSpan{} : span_of(slot);
}

size_t NgramCache::insert_slot(NgramKey key) {
    // Grow at 3/4 load: linear probing degrades quickly beyond that.
    if ((m_n_keys + 1) * 4 > m_keys.size() * 3) rehash(m_keys.size() * 2);
    size_t slot = home_slot(key);
    for (; m_keys[slot].lo != k_empty_lo; slot = (slot + 1) & m_mask) {
        if (m_keys[slot] == key) return slot;
    }
    m_keys[slot] = key;
    m_entries[slot] = Entry{allocate_block(0), 0, 0, 0, 0};
    ++m_n_keys;
    return slot;
}

// Backward-shift deletion keeps probe chains intact without tombstones, so a cache that sees
// files come and go for hours does not slow down.
void NgramCache::erase_slot(size_t slot) {
    release_block(m_entries[slot].begin, m_entries[slot].cap_log2);
    size_t hole = slot;
    for (size_t next = (hole + 1) & m_mask; m_keys[next].lo != k_empty_lo;
         next = (next + 1) & m_mask) {
        const size_t home = home_slot(m_keys[next]);
        // The entry at `next` may fill the hole only if its home is not cyclically in (hole, next].
        const bool home_between = hole < next ? (home > hole && home <= next)
                                              : (home > hole || home <= next);
        if (home_between) continue;
        m_keys[hole] = m_keys[next];
        m_entries[hole] = m_entries[next];
        hole = next;
    }
    m_keys[hole].lo = k_empty_lo;
    --m_n_keys;
}

void NgramCache::rehash(size_t n_slots) {
    std::vector<NgramKey> old_keys(n_slots, NgramKey{k_empty_lo, k_empty_lo});
    std::vector<Entry> old_entries(n_slots);
    old_keys.swap(m_keys);
    old_entries.swap(m_entries);
    m_mask = n_slots - 1;
    for (size_t i = 0; i < old_keys.size(); ++i) {
        if (old_keys[i].lo == k_empty_lo) continue;
        size_t slot = home_slot(old_keys[i]);
        while (m_keys[slot].lo != k_empty_lo) slot = (slot + 1) & m_mask;
        m_keys[slot] = old_keys[i];
        m_entries[slot] = old_entries[i];
    }
}

uint32_t NgramCache::allocate_block(uint32_t cap_log2) {
    std::vector<uint32_t>& free_list = m_free_blocks[cap_log2];
    if (!free_list.empty()) {
        const uint32_t begin = free_list.back();
        free_list.pop_back();
        return begin;
    }
    const size_t begin = m_pool.size();
    m_pool.resize(begin + (size_t{1} << cap_log2));
    return static_cast<uint32_t>(begin);
}

void NgramCache::release_block(uint32_t begin, uint32_t cap_log2) {
    m_free_blocks[cap_log2].push_back(begin);
}

void NgramCache::grow_block(Entry& entry) {
    const uint32_t begin = allocate_block(entry.cap_log2 + 1);
    std::memcpy(m_pool.data() + begin, m_pool.data() + entry.begin, entry.size * sizeof(Follower));
    release_block(entry.begin, entry.cap_log2);
    entry.begin = begin;
    entry.cap_log2 += 1;
}

void NgramCache::add_count(NgramKey key, token_t token, uint32_t count) {
    const size_t slot = insert_slot(key);
    Entry& e = m_entries[slot];
    Follower* first = m_pool.data() + e.begin;
    Follower* it = lower_bound_token(first, first + e.size, token);
    if (it != first + e.size && it->token == token) {
        it->count += count;
    } else {
        const size_t index = static_cast<size_t>(it - first);
        if (e.size == (1u << e.cap_log2)) grow_block(e);
        first = m_pool.data() + e.begin;
        it = first + index;
        std::memmove(it + 1, it, (e.size - index) * sizeof(Follower));
        *it = Follower{token, count};
        ++e.size;
        ++m_n_followers;
    }
    e.sum += count;
    e.max_count = std::max(e.max_count, it->count);
    m_total_count += count;
}

bool NgramCache::remove_count(NgramKey key, token_t token, uint32_t count) {
    const size_t slot = find_slot(key);
    if (slot == m_keys.size()) return false;
    Entry& e = m_entries[slot];
    Follower* first = m_pool.data() + e.begin;
    Follower* it = lower_bound_token(first, first + e.size, token);
    if (it == first + e.size || it->token != token || it->count < count) return false;
    const uint32_t old_count = it->count;
    it->count -= count;
    e.sum -= count;
    m_total_count -= count;
    if (it->count == 0) {
        std::memmove(it, it + 1, (first + e.size - it - 1) * sizeof(Follower));
        --e.size;
        --m_n_followers;
        if (e.size == 0) {
            erase_slot(slot);
            return true;
        }
    }
    if (old_count == e.max_count) {
        uint32_t max_count = 0;
        for (const Follower* f = first; f != first + e.size; ++f) max_count = std::max(max_count, f->count);
        e.max_count = max_count;
    }
    return true;
}

void NgramCache::add(const token_t* tokens, size_t n_tokens, size_t first) {
    for (size_t i = std::max<size_t>(first, 1); i < n_tokens; ++i) {
        for (int n = k_ngram_min; n <= k_ngram_max && static_cast<size_t>(n) <= i; ++n) {
            add_count(make_key(tokens + i - n, n), tokens[i], 1);
        }
    }
}

size_t NgramCache::remove(const token_t* tokens, size_t n_tokens, size_t first) {
    size_t missing = 0;
    for (size_t i = std::max<size_t>(first, 1); i < n_tokens; ++i) {
        for (int n = k_ngram_min; n <= k_ngram_max && static_cast<size_t>(n) <= i; ++n) {
            missing += remove_count(make_key(tokens + i - n, n), tokens[i], 1) ? 0 : 1;
        }
    }
    return missing;
}

void NgramCache::merge(const NgramCache& other) {
    if (&other == this) {
        // Doubling every count; iterate a snapshot because add_count may move blocks.
        NgramCache copy = other;
        merge(copy);
        return;
    }
    other.for_each([&](NgramKey key, FollowerSpan followers) {
        for (const Follower& f : followers) add_count(key, f.token, f.count);
    });
}

void NgramCache::clear() {
    m_pool.clear();
    for (std::vector<uint32_t>& free_list : m_free_blocks) free_list.clear();
    m_n_keys = 0;
    m_n_followers = 0;
    m_total_count = 0;
    std::vector<NgramKey>().swap(m_keys);
    std::vector<Entry>().swap(m_entries);
    rehash(k_min_slots);
}

size_t NgramCache::memory_bytes() const {
    size_t bytes = m_keys.capacity() * sizeof(NgramKey) + m_entries.capacity() * sizeof(Entry) +
                   m_pool.capacity() * sizeof(Follower);
    for (const std::vector<uint32_t>& free_list : m_free_blocks) bytes += free_list.capacity() * 4;
    return bytes;
}

}  // namespace lookup
