#include "workspace_layers.h"

#include <algorithm>

namespace lookup {

namespace {

struct Scratch {
    std::vector<Follower> table;
    std::vector<Follower> table_sorted;
    std::vector<Follower> added;
    std::vector<Follower> removed;
    std::vector<Follower> merged;
};

// The span's followers ascending by token, holes left out: the span itself when it is sorted,
// else a sorted copy in `buffer`.
const Follower* sorted_view(const FollowerSpan& span, std::vector<Follower>& buffer, size_t* n) {
    if (span.sorted) {
        *n = span.size;
        return span.data;
    }
    buffer.clear();
    for (const Follower& f : span) {
        if (f.count > 0) buffer.push_back(f);
    }
    std::sort(buffer.begin(), buffer.end(), [](const Follower& a, const Follower& b) { return a.token < b.token; });
    *n = buffer.size();
    return buffer.data();
}

}  // namespace

FollowerSpan WorkspaceLayers::find(NgramKey key) const {
    if (table == nullptr) return added != nullptr ? added->find(key) : FollowerSpan{};
    thread_local Scratch scratch;
    const FollowerSpan base = table->find(key, scratch.table);
    const FollowerSpan plus = added != nullptr ? added->find(key) : FollowerSpan{};
    const FollowerSpan minus = removed != nullptr ? removed->find(key) : FollowerSpan{};
    if (minus.empty()) {
        if (plus.empty()) return base;
        if (base.empty()) return plus;
    }
    size_t n_base = 0, n_plus = 0, n_minus = 0;
    const Follower* b = sorted_view(base, scratch.table_sorted, &n_base);
    const Follower* p = sorted_view(plus, scratch.added, &n_plus);
    const Follower* m = sorted_view(minus, scratch.removed, &n_minus);
    std::vector<Follower>& out = scratch.merged;
    out.resize(n_base + n_plus);
    FollowerSpan span{out.data(), 0, 0, 0, true};
    size_t i = 0, j = 0, k = 0;
    while (i < n_base || j < n_plus) {
        const token_t t = j == n_plus || (i < n_base && b[i].token < p[j].token) ? b[i].token : p[j].token;
        uint64_t count = 0;
        if (i < n_base && b[i].token == t) count += b[i++].count;
        if (j < n_plus && p[j].token == t) count += p[j++].count;
        while (k < n_minus && m[k].token < t) ++k;
        if (k < n_minus && m[k].token == t) count -= std::min<uint64_t>(count, m[k].count);
        if (count == 0) continue;
        const uint32_t c = static_cast<uint32_t>(std::min<uint64_t>(count, UINT32_MAX));
        out[span.size++] = {t, c};
        span.sum += c;
        span.max_count = std::max(span.max_count, c);
    }
    return span;
}

}  // namespace lookup
