#include "drafter.h"

#include <algorithm>
#include <cstring>

namespace lookup {

namespace {

// The drafter's view of a sequence: the known tokens followed by the tokens drafted so far,
// without concatenating them.
struct Sequence {
    const token_t* known;
    size_t n_known;
    const token_t* drafted;
    size_t n_drafted;

    [[nodiscard]] size_t size() const { return n_known + n_drafted; }
    [[nodiscard]] token_t at(size_t i) const { return i < n_known ? known[i] : drafted[i - n_known]; }
    [[nodiscard]] NgramKey last_key(int n) const {
        token_t t[k_ngram_max];
        for (int j = 0; j < n; ++j) t[j] = at(size() - n + j);
        return make_key(t, n);
    }
};

// Scores followers against the static cache's followers of the last two tokens (ascending). Followers
// of a sorted span come in ascending order too, so each search starts where the previous one
// ended; a hashed span's order sends the search back to the start.
class RepositoryWeights {
public:
    explicit RepositoryWeights(const FollowerSpan& repository_part)
        : m_begin(repository_part.begin()), m_at(repository_part.begin()), m_end(repository_part.end()) {}

    [[nodiscard]] uint64_t score(const Follower& f) {
        // Everything before m_at is below the previous token, so only a smaller token rewinds.
        if (f.token < m_last) m_at = m_begin;
        m_last = f.token;
        m_at = std::lower_bound(m_at, m_end, f.token, [](const Follower& s, token_t t) { return s.token < t; });
        const uint32_t s = m_at != m_end && m_at->token == f.token ? m_at->count : 0;
        return uint64_t{f.count} * (s > 0 ? k_repository_weight * s : 1);
    }

private:
    const Follower* m_begin;
    const Follower* m_at;
    const Follower* m_end;
    token_t m_last = -1;
};

// Is (score, token) a better candidate than the best so far? Higher scores win, equal ones go
// to the lower token id (the deterministic tie-break; a sorted span meets tokens in ascending
// order anyway, a hashed one does not).
[[nodiscard]] bool better(uint64_t score, token_t token, uint64_t best_score, token_t best_token) {
    return score > best_score || (score == best_score && token < best_token);
}

[[nodiscard]] bool passes_percent(uint64_t count, uint64_t sum, uint32_t min_percent) {
    return 100 * count >= uint64_t{min_percent} * sum;
}

// The best-scored follower of one key, or -1 when the key does not qualify. The precheck
// rejects a key that cannot qualify before any repository look-up: if even its largest raw count
// fails the percent test, the best-scored follower fails it too.
template <class RepositoryPart>
[[nodiscard]] const Follower* best_follower(const FollowerSpan& followers, RepositoryPart&& repository_part,
                                            uint32_t min_sample, uint32_t min_percent) {
    if (followers.empty() || followers.sum < min_sample) return nullptr;
    if (!passes_percent(followers.max_count, followers.sum, min_percent)) return nullptr;
    // A single follower is its key's best whatever its weight (and passed the precheck).
    if (followers.size == 1) return followers.data;
    RepositoryWeights weights(repository_part());
    const Follower* best = nullptr;
    uint64_t best_score = 0;
    for (const Follower& f : followers) {
        if (f.count == 0) continue;  // a hole of a hashed span
        const uint64_t score = weights.score(f);
        if (best == nullptr || better(score, f.token, best_score, best->token)) {
            best = &f;
            best_score = score;
        }
    }
    return passes_percent(best->count, followers.sum, min_percent) ? best : nullptr;
}

// The static cache's entry of the sequence's last two tokens, looked up only when needed: a step that
// a single-follower key decides (most steps of a long, accepted draft) never reads it. Its
// bucket is prefetched at once, so a later look-up waits for one cache miss instead of two.
class RepositoryLookup {
public:
    RepositoryLookup(const Sequence& seq, const StaticCache* cache) : m_cache(cache) {
        if (cache == nullptr) return;
        m_t0 = seq.at(seq.size() - 2);
        m_t1 = seq.at(seq.size() - 1);
        cache->prefetch(m_t0, m_t1);
    }
    [[nodiscard]] const StaticCache::Entry& get() {
        if (!m_done && m_cache != nullptr) m_entry = m_cache->find(m_t0, m_t1);
        m_done = true;
        return m_entry;
    }

private:
    const StaticCache* m_cache;
    token_t m_t0 = 0;
    token_t m_t1 = 0;
    bool m_done = false;
    StaticCache::Entry m_entry;
};

// The keys of every n-gram size ending at the sequence's last token, longest first.
struct TailKeys {
    explicit TailKeys(const Sequence& seq) : n(static_cast<int>(std::min<size_t>(k_ngram_max, seq.size()))) {
        for (int i = 0; i < n; ++i) keys[i] = seq.last_key(n - i);
    }
    void prefetch(const NgramCache* cache) const {
        if (cache == nullptr) return;
        for (int i = 0; i < n; ++i) cache->prefetch(keys[i]);
    }
    void prefetch(const WorkspaceLayers& layers) const {
        for (int i = 0; i < n; ++i) layers.prefetch(keys[i]);
    }
    NgramKey keys[k_ngram_max];
    int n;
};

// Cache: NgramCache or WorkspaceLayers (anything with find(key) -> FollowerSpan).
template <class Cache>
[[nodiscard]] DraftEvidence try_cache(const TailKeys& tail, const Cache* cache, DraftSource source,
                                      const DraftThresholds& th, RepositoryLookup& stat) {
    if (cache == nullptr) return {};
    for (int i = 0; i < tail.n; ++i) {
        const int n = tail.n - i;
        const FollowerSpan followers = cache->find(tail.keys[i]);
        const Follower* f = best_follower(followers, [&]() { return stat.get().followers; },
                                          th.min_sample[n - 1], th.min_percent[n - 1]);
        if (f != nullptr) return {f->token, source, static_cast<uint8_t>(n), f->count, followers.sum};
    }
    return {};
}

// The repository (static) cache stores no per-key totals; the token tree computes them when it needs them.
[[nodiscard]] FollowerSpan with_totals(FollowerSpan followers) {
    for (const Follower& f : followers) {
        followers.sum += f.count;
        followers.max_count = std::max(followers.max_count, f.count);
    }
    return followers;
}

// The static cache's own decision, with its counts (its entries store no totals: summed
// here, only on the rare steps the static cache decides alone).
[[nodiscard]] DraftEvidence repository_decision(const StaticCache::Entry& entry) {
    if (entry.fallback < 0) return {};
    DraftEvidence e{entry.fallback, DraftSource::repository, k_static_ngram, 0, 0};
    for (const Follower& f : entry.followers) {
        e.sum += f.count;
        if (f.token == entry.fallback) e.count = f.count;
    }
    return e;
}

[[nodiscard]] DraftEvidence next_token(const Sequence& seq, const DraftCaches& sources) {
    const TailKeys tail(seq);
    tail.prefetch(sources.context);
    tail.prefetch(sources.workspace);
    RepositoryLookup stat(seq, sources.repository);
    DraftEvidence e = try_cache(tail, sources.context, DraftSource::context, k_context_thresholds, stat);
    if (e.token < 0 && !sources.workspace.empty()) {
        e = try_cache(tail, &sources.workspace, DraftSource::workspace, k_workspace_thresholds, stat);
    }
    return e.token >= 0 ? e : repository_decision(stat.get());
}

// Continues the draft already in out[0..n_out) up to n_draft tokens; evidence, if not null,
// receives each new token's decision at the same index.
size_t extend(const token_t* known, size_t n_known, const DraftCaches& sources, size_t n_draft,
              token_t* out, size_t n_out, DraftEvidence* evidence = nullptr) {
    if (n_known + n_out < k_static_ngram) return n_out;
    while (n_out < n_draft) {
        const DraftEvidence e = next_token(Sequence{known, n_known, out, n_out}, sources);
        if (e.token < 0) break;
        if (evidence != nullptr) evidence[n_out] = e;
        out[n_out++] = e.token;
    }
    return n_out;
}

// Candidates for the next token, best first: every key that qualifies (in draft()'s order of
// sources and sizes) offers its best-scored follower, then its other followers that pass the
// percent test on their own, by descending score.
size_t next_candidates(const Sequence& seq, const DraftCaches& sources, DraftEvidence* out, size_t max_out) {
    size_t n_out = 0;
    auto offer = [&](const DraftEvidence& e) {
        const bool seen = std::any_of(out, out + n_out, [&](const DraftEvidence& o) { return o.token == e.token; });
        if (n_out < max_out && !seen) out[n_out++] = e;
    };
    const FollowerSpan repository_part = RepositoryLookup(seq, sources.repository).get().followers;
    // `weights` is the repository part for the context and workspace caches, empty for the repository one.
    auto offer_key = [&](const FollowerSpan& followers, const FollowerSpan& weights, uint32_t min_sample,
                         uint32_t min_percent, DraftSource source, int n) {
        const Follower* chosen = best_follower(followers, [&]() { return weights; }, min_sample, min_percent);
        if (chosen == nullptr) return;
        const auto ngram = static_cast<uint8_t>(n);
        offer({chosen->token, source, ngram, chosen->count, followers.sum});
        // Above 50 % at most one other follower can pass; scan for the rare ties.
        const Follower* runner_up = nullptr;
        uint64_t runner_score = 0;
        RepositoryWeights scorer(weights);
        for (const Follower& f : followers) {
            if (f.token == chosen->token || !passes_percent(f.count, followers.sum, min_percent)) continue;
            const uint64_t score = scorer.score(f);
            if (runner_up == nullptr || better(score, f.token, runner_score, runner_up->token)) {
                runner_up = &f;
                runner_score = score;
            }
        }
        if (runner_up != nullptr) offer({runner_up->token, source, ngram, runner_up->count, followers.sum});
    };
    const TailKeys tail(seq);
    auto offer_cache = [&](const auto* cache, const DraftThresholds& th, DraftSource source) {
        if (cache == nullptr) return;
        for (int i = 0; i < tail.n; ++i) {
            const int n = tail.n - i;
            offer_key(cache->find(tail.keys[i]), repository_part, th.min_sample[n - 1], th.min_percent[n - 1],
                      source, n);
        }
    };
    offer_cache(sources.context, k_context_thresholds, DraftSource::context);
    if (!sources.workspace.empty()) offer_cache(&sources.workspace, k_workspace_thresholds, DraftSource::workspace);
    offer_key(with_totals(repository_part), FollowerSpan{}, k_static_min_sample, k_static_min_percent,
              DraftSource::repository, k_static_ngram);
    return n_out;
}

}  // namespace

size_t draft(const token_t* known, size_t n_known, const DraftCaches& sources, size_t n_draft,
             token_t* out, DraftEvidence* evidence) {
    return extend(known, n_known, sources, n_draft, out, 0, evidence);
}

size_t draft_tree(const token_t* known, size_t n_known, const DraftCaches& sources, size_t n_draft,
                  size_t max_branches, token_t* out_tokens, int32_t* out_parents, DraftEvidence* evidence) {
    if (n_draft == 0 || max_branches == 0) return 0;
    const size_t main_length = extend(known, n_known, sources, n_draft, out_tokens, 0, evidence);
    for (size_t i = 0; i < main_length; ++i) out_parents[i] = static_cast<int32_t>(i) - 1;
    size_t n_nodes = main_length;
    size_t n_branches = main_length > 0 ? 1 : 0;
    constexpr size_t k_max_candidates = 16;
    DraftEvidence candidates[k_max_candidates];
    for (size_t depth = 0; depth < main_length && n_branches < max_branches; ++depth) {
        const size_t n_candidates =
            next_candidates(Sequence{known, n_known, out_tokens, depth}, sources, candidates, k_max_candidates);
        for (size_t c = 0; c < n_candidates && n_branches < max_branches; ++c) {
            if (candidates[c].token == out_tokens[depth]) continue;
            // Draft the branch as main[:depth] + candidate + continuation in the free space after
            // the nodes so far (room for n_draft tokens is left while branches remain), then keep
            // only the part from the candidate on.
            token_t* scratch = out_tokens + n_nodes;
            DraftEvidence* scratch_evidence = evidence != nullptr ? evidence + n_nodes : nullptr;
            std::copy(out_tokens, out_tokens + depth, scratch);
            scratch[depth] = candidates[c].token;
            if (scratch_evidence != nullptr) scratch_evidence[depth] = candidates[c];
            const size_t length =
                extend(known, n_known, sources, n_draft, scratch, depth + 1, scratch_evidence) - depth;
            std::memmove(scratch, scratch + depth, length * sizeof(token_t));
            if (scratch_evidence != nullptr) {
                std::copy(scratch_evidence + depth, scratch_evidence + depth + length, scratch_evidence);
            }
            for (size_t i = 0; i < length; ++i) {
                out_parents[n_nodes + i] = i == 0 ? static_cast<int32_t>(depth) - 1 : static_cast<int32_t>(n_nodes + i - 1);
            }
            n_nodes += length;
            ++n_branches;
        }
    }
    return n_nodes;
}

}  // namespace lookup
