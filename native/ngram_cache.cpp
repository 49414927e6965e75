#include "ngram_cache.h"

#include <algorithm>
#include <cstring>

namespace lookup {

namespace {

// Branch-free binary search that prefetches both possible next probes: the follower arrays of
// common 1- and 2-grams run to thousands of entries, and overlapping their cache misses roughly
// halves the search time.
[[nodiscard]] Follower* lower_bound_token(Follower* first, Follower* last, token_t token) {
    size_t n = static_cast<size_t>(last - first);
    if (n == 0) return first;
    Follower* base = first;
    while (n > 1) {
        const size_t half = n / 2;
        __builtin_prefetch(base + half / 2);
        __builtin_prefetch(base + half + half / 2);
        base = base[half].token < token ? base + half : base;
        n -= half;
    }
    return base + (base->token < token);
}

}  // namespace

size_t NgramCache::find_slot(NgramKey key) const {
    for (size_t i = home_slot(key);; i = (i + 1) & m_mask) {
        if (m_slots[i].key == key) return i;
        if (m_slots[i].key.lo == k_empty_lo) return m_slots.size();
    }
}

FollowerSpan NgramCache::find(NgramKey key) const {
    const size_t i = find_slot(key);
    return i == m_slots.size() ? FollowerSpan{} : span_of(m_slots[i]);
}

size_t NgramCache::insert_slot(NgramKey key) {
    // Grow at half load: with linear probing a miss (every new key, most drafting look-ups)
    // scans ~2.5 slots there but ~8.5 at 3/4 load.
    if ((m_n_keys + 1) * 2 > m_slots.size()) rehash(m_slots.size() * 2);
    size_t i = home_slot(key);
    for (; m_slots[i].key.lo != k_empty_lo; i = (i + 1) & m_mask) {
        if (m_slots[i].key == key) return i;
    }
    m_slots[i] = Slot{key, 0, 0, Follower{0, 0}};
    ++m_n_keys;
    return i;
}

// Backward-shift deletion keeps probe chains intact without tombstones, so a cache that sees
// files come and go for hours does not slow down.
void NgramCache::erase_slot(size_t slot) {
    if (m_slots[slot].size() > 1) release_block(m_slots[slot].begin(), m_slots[slot].cap_log2());
    size_t hole = slot;
    for (size_t next = (hole + 1) & m_mask; m_slots[next].key.lo != k_empty_lo; next = (next + 1) & m_mask) {
        const size_t home = home_slot(m_slots[next].key);
        // The entry at `next` may fill the hole only if its home is not cyclically in (hole, next].
        const bool home_between = hole < next ? (home > hole && home <= next) : (home > hole || home <= next);
        if (home_between) continue;
        m_slots[hole] = m_slots[next];
        hole = next;
    }
    m_slots[hole].key.lo = k_empty_lo;
    --m_n_keys;
}

void NgramCache::rehash(size_t n_slots) {
    Slot empty{};
    empty.key = NgramKey{k_empty_lo, k_empty_lo};
    std::vector<Slot, HugePageAllocator<Slot>> old(n_slots, empty);
    old.swap(m_slots);
    m_mask = n_slots - 1;
    for (const Slot& s : old) {
        if (s.key.lo == k_empty_lo) continue;
        size_t i = home_slot(s.key);
        while (m_slots[i].key.lo != k_empty_lo) i = (i + 1) & m_mask;
        m_slots[i] = s;
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

namespace {

[[nodiscard]] size_t home_in_block(token_t token, uint32_t cap_log2) {
    return (static_cast<uint32_t>(token) * 0x9E3779B1u) >> (32 - cap_log2);
}

}  // namespace

// Moves the key's followers into a new block of 1 << cap_log2 entries, sorted or hashed as that
// capacity dictates.
void NgramCache::rebuild_block(Slot& s, uint32_t cap_log2) {
    constexpr size_t k_sorted_max = size_t{1} << k_sorted_max_log2;
    Follower live[k_sorted_max];
    const uint32_t begin = allocate_block(cap_log2);
    const FollowerSpan old = span_of(s);
    Follower* block = m_pool.data() + begin;
    const size_t capacity = size_t{1} << cap_log2;
    if (cap_log2 > k_sorted_max_log2) {
        for (size_t i = 0; i < capacity; ++i) block[i].count = 0;
        for (const Follower& f : old) {
            if (f.count == 0) continue;
            size_t i = home_in_block(f.token, cap_log2);
            while (block[i].count != 0) i = (i + 1) & (capacity - 1);
            block[i] = f;
        }
    } else {
        size_t n = 0;
        for (const Follower& f : old) {
            if (f.count > 0) live[n++] = f;
        }
        if (!old.sorted) std::sort(live, live + n, [](const Follower& a, const Follower& b) { return a.token < b.token; });
        std::memcpy(block, live, n * sizeof(Follower));
    }
    release_block(s.begin(), s.cap_log2());
    s.head.token = static_cast<token_t>(begin);
    s.set(s.size(), cap_log2);
}

Follower* NgramCache::find_follower(const Slot& s, token_t token) {
    Follower* block = m_pool.data() + s.begin();
    if (!is_hashed(s)) {
        Follower* it = lower_bound_token(block, block + s.size(), token);
        return it != block + s.size() && it->token == token ? it : nullptr;
    }
    const size_t mask = (size_t{1} << s.cap_log2()) - 1;
    for (size_t i = home_in_block(token, s.cap_log2());; i = (i + 1) & mask) {
        if (block[i].count == 0) return nullptr;
        if (block[i].token == token) return block + i;
    }
}

void NgramCache::add_count(NgramKey key, token_t token, uint32_t count) {
    Slot& s = m_slots[insert_slot(key)];
    m_total_count += count;
    s.sum += count;
    if (s.size() == 0) {
        s.head = Follower{token, count};
        s.set(1, 0);
        ++m_n_followers;
    } else if (s.size() == 1 && s.head.token == token) {
        s.head.count += count;
    } else if (s.size() == 1) {
        // A second follower: move both into a pool block of two.
        const Follower single = s.head;
        const uint32_t begin = allocate_block(1);
        const Follower added{token, count};
        m_pool[begin] = single.token < token ? single : added;
        m_pool[begin + 1] = single.token < token ? added : single;
        s.head = Follower{static_cast<token_t>(begin), std::max(single.count, count)};
        s.set(2, 1);
        ++m_n_followers;
    } else {
        add_to_pool(s, token, count);
    }
}

void NgramCache::add_to_pool(Slot& s, token_t token, uint32_t count) {
    if (Follower* found = find_follower(s, token)) {
        found->count += count;
        s.head.count = std::max(s.head.count, found->count);
        return;
    }
    const uint32_t size = s.size();
    const uint32_t capacity = 1u << s.cap_log2();
    if (is_hashed(s)) {
        // Kept at most half full, so probe runs stay short.
        if ((size + 1) * 2 > capacity) rebuild_block(s, s.cap_log2() + 1);
        Follower* block = m_pool.data() + s.begin();
        const size_t mask = (size_t{1} << s.cap_log2()) - 1;
        size_t i = home_in_block(token, s.cap_log2());
        while (block[i].count != 0) i = (i + 1) & mask;
        block[i] = Follower{token, count};
    } else if (size == capacity && s.cap_log2() == k_sorted_max_log2) {
        rebuild_block(s, k_sorted_max_log2 + 2);
        add_to_pool(s, token, count);
        return;
    } else {
        if (size == capacity) rebuild_block(s, s.cap_log2() + 1);
        Follower* first = m_pool.data() + s.begin();
        Follower* it = lower_bound_token(first, first + size, token);
        std::memmove(it + 1, it, static_cast<size_t>(first + size - it) * sizeof(Follower));
        *it = Follower{token, count};
    }
    s.set(size + 1, s.cap_log2());
    s.head.count = std::max(s.head.count, count);
    ++m_n_followers;
}

bool NgramCache::remove_count(NgramKey key, token_t token, uint32_t count) {
    const size_t i = find_slot(key);
    if (i == m_slots.size()) return false;
    Slot& s = m_slots[i];
    if (s.size() == 1) {
        if (s.head.token != token || s.head.count < count) return false;
        s.head.count -= count;
    } else {
        Follower* it = find_follower(s, token);
        if (it == nullptr || it->count < count) return false;
        remove_from_pool(s, it, count);
    }
    s.sum -= count;
    m_total_count -= count;
    if (s.sum == 0) {
        --m_n_followers;
        erase_slot(i);
    }
    return true;
}

// Backward-shift deletion inside a hashed block (no tombstones: holes are count 0).
void NgramCache::erase_hashed(const Slot& s, Follower* it) {
    Follower* block = m_pool.data() + s.begin();
    const size_t mask = (size_t{1} << s.cap_log2()) - 1;
    size_t hole = static_cast<size_t>(it - block);
    for (size_t next = (hole + 1) & mask; block[next].count != 0; next = (next + 1) & mask) {
        const size_t home = home_in_block(block[next].token, s.cap_log2());
        const bool home_between = hole < next ? (home > hole && home <= next) : (home > hole || home <= next);
        if (home_between) continue;
        block[hole] = block[next];
        hole = next;
    }
    block[hole].count = 0;
}

// Keeps the one-follower-inline form: a block left with a single follower goes back to the slot.
void NgramCache::remove_from_pool(Slot& s, Follower* it, uint32_t count) {
    const uint32_t old_count = it->count;
    it->count -= count;
    uint32_t size = s.size();
    if (it->count == 0) {
        if (is_hashed(s)) {
            erase_hashed(s, it);
        } else {
            Follower* first = m_pool.data() + s.begin();
            std::memmove(it, it + 1, static_cast<size_t>(first + size - it - 1) * sizeof(Follower));
        }
        s.set(--size, s.cap_log2());
        --m_n_followers;
    }
    if (size == 1) {
        // span_of() would now read the slot as inline: look in the block itself.
        const Follower* block = m_pool.data() + s.begin();
        const size_t entries = is_hashed(s) ? size_t{1} << s.cap_log2() : 1;
        Follower last{};
        for (size_t i = 0; i < entries; ++i) {
            if (block[i].count > 0) last = block[i];
        }
        release_block(s.begin(), s.cap_log2());
        s.head = last;
        s.set(1, 0);
        return;
    }
    if (is_hashed(s) && size <= k_unhash_size) rebuild_block(s, k_sorted_max_log2);
    // The precheck needs only an upper bound of the largest count. Recounting a long array (a
    // common 1-gram's thousands of followers) at every removal would dominate removing a file,
    // so long arrays keep the old bound; it becomes exact again when the array shrinks.
    if (old_count == s.head.count && size <= k_exact_max_size) {
        uint32_t max_count = 0;
        for (const Follower& f : span_of(s)) max_count = std::max(max_count, f.count);
        s.head.count = max_count;
    }
}

// Calls apply(key, follower) for every n-gram whose follower index is >= first, in order. A
// workspace's table lives far outside the CPU caches, so the work is pipelined over runs of
// positions: run r's slots are prefetched while run r - 1 is applied, and the cache misses of
// a whole run overlap instead of following one another.
template <class Apply>
void NgramCache::for_each_ngram(const token_t* tokens, size_t n_tokens, size_t first, Apply&& apply) const {
    constexpr size_t k_run = 8;
    struct Run {
        NgramKey keys[k_run * k_ngram_max];
        token_t followers[k_run * k_ngram_max];
        size_t size = 0;
    };
    Run runs[2];
    const size_t start = std::max<size_t>(first, 1);
    const size_t n_runs = start < n_tokens ? (n_tokens - start + k_run - 1) / k_run : 0;
    for (size_t r = 0; r <= n_runs; ++r) {
        if (r < n_runs) {
            Run& run = runs[r % 2];
            run.size = 0;
            const size_t end = std::min(start + (r + 1) * k_run, n_tokens);
            for (size_t i = start + r * k_run; i < end; ++i) {
                for (size_t n = 1; n <= k_ngram_max && n <= i; ++n) {
                    run.keys[run.size] = make_key(tokens + i - n, static_cast<int>(n));
                    run.followers[run.size] = tokens[i];
                    prefetch(run.keys[run.size++]);
                }
            }
        }
        if (r >= 1) {
            const Run& run = runs[(r - 1) % 2];
            for (size_t k = 0; k < run.size; ++k) apply(run.keys[k], run.followers[k]);
        }
    }
}

void NgramCache::add(const token_t* tokens, size_t n_tokens, size_t first) {
    for_each_ngram(tokens, n_tokens, first, [this](NgramKey key, token_t token) { add_count(key, token, 1); });
}

size_t NgramCache::remove(const token_t* tokens, size_t n_tokens, size_t first) {
    size_t missing = 0;
    for_each_ngram(tokens, n_tokens, first, [&](NgramKey key, token_t token) {
        missing += remove_count(key, token, 1) ? 0 : 1;
    });
    return missing;
}

void NgramCache::merge(const NgramCache& other) {
    if (&other == this) {
        // Doubling every count; iterate a snapshot because add_count may move blocks.
        const NgramCache copy = other;
        merge(copy);
        return;
    }
    other.for_each([&](NgramKey key, FollowerSpan followers) {
        for (const Follower& f : followers) {
            if (f.count > 0) add_count(key, f.token, f.count);
        }
    });
}

// Keeps the table and the pool's memory: a context cache is cleared for every request and
// would otherwise regrow (and rehash) from scratch each time.
void NgramCache::clear() {
    m_pool.clear();
    for (std::vector<uint32_t>& free_list : m_free_blocks) free_list.clear();
    for (Slot& s : m_slots) s.key.lo = k_empty_lo;
    m_n_keys = 0;
    m_n_followers = 0;
    m_total_count = 0;
}

size_t NgramCache::slots_for(size_t n_keys) {
    size_t n_slots = k_min_slots;
    while (n_slots < 2 * (n_keys + 1)) n_slots *= 2;
    return n_slots;
}

void NgramCache::reserve(size_t n_keys, size_t n_pool) {
    if (slots_for(n_keys) > m_slots.size()) rehash(slots_for(n_keys));
    m_pool.reserve(n_pool);
}

size_t NgramCache::memory_bytes() const {
    size_t bytes = m_slots.capacity() * sizeof(Slot) + m_pool.capacity() * sizeof(Follower);
    for (const std::vector<uint32_t>& free_list : m_free_blocks) bytes += free_list.capacity() * 4;
    return bytes;
}

}  // namespace lookup
