#include "static_cache_builder.h"

#include "atomic_file.h"
#include "checksum.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>

namespace lookup {

namespace {

constexpr int k_token_bits = 21;
constexpr uint64_t k_token_mask = (uint64_t{1} << k_token_bits) - 1;
constexpr size_t k_min_pending = size_t{1} << 20;

// Sort order of packed words = (t0, t1, follower) order: keys group together, followers ascend.
[[nodiscard]] uint64_t pack_triple(token_t t0, token_t t1, token_t follower) {
    return (uint64_t(uint32_t(t0)) << (2 * k_token_bits)) | (uint64_t(uint32_t(t1)) << k_token_bits) |
           uint64_t(uint32_t(follower));
}

[[nodiscard]] uint64_t triple_pair(uint64_t triple) {
    return pack_pair(static_cast<token_t>(triple >> (2 * k_token_bits)),
                     static_cast<token_t>((triple >> k_token_bits) & k_token_mask));
}

[[nodiscard]] token_t triple_follower(uint64_t triple) { return static_cast<token_t>(triple & k_token_mask); }

// One sorted input of a merge: packed words, each with a count (1 where both count arrays are
// null). The entries' counts stay 32-bit and imported ones 64-bit, so nothing is widened.
struct SortedRun {
    const uint64_t* words;
    const uint32_t* counts32;
    const uint64_t* counts64;
    size_t size;
    size_t pos = 0;

    [[nodiscard]] bool done() const { return pos == size; }
    [[nodiscard]] uint64_t word() const { return words[pos]; }
    [[nodiscard]] uint64_t count() const { return counts32 ? counts32[pos] : counts64 ? counts64[pos] : 1; }
};

// Calls emit(word, total count) for each distinct word of the runs, in ascending order.
template <size_t N, class Emit>
void merge_runs(std::array<SortedRun, N>& runs, Emit&& emit) {
    for (;;) {
        uint64_t word = ~uint64_t{0};
        for (const SortedRun& r : runs) {
            if (!r.done()) word = std::min(word, r.word());
        }
        if (word == ~uint64_t{0}) return;
        uint64_t count = 0;
        for (SortedRun& r : runs) {
            for (; !r.done() && r.word() == word; ++r.pos) count += r.count();
        }
        emit(word, count);
    }
}

// Streams bytes into a file, folding them into the checksum and tracking the offset.
class ChecksummedWriter {
public:
    explicit ChecksummedWriter(AtomicFile& file) : m_file(file) {}

    void write(const void* data, size_t size) {
        m_sum.update(data, size);
        m_offset += size;
        m_file.write(data, size);
    }
    void pad_to(uint64_t offset) {
        static const unsigned char zeros[k_section_alignment] = {};
        while (m_offset < offset) write(zeros, static_cast<size_t>(std::min<uint64_t>(offset - m_offset, sizeof zeros)));
    }
    [[nodiscard]] uint64_t digest() const { return m_sum.digest(); }

private:
    AtomicFile& m_file;
    uint64_t m_offset = 0;
    Checksum m_sum;
};

}  // namespace

void StaticCacheBuilder::add(const token_t* tokens, size_t n_tokens) {
    m_n_tokens += n_tokens;
    for (size_t i = k_static_ngram; i < n_tokens; ++i) {
        m_pending.push_back(pack_triple(tokens[i - 2], tokens[i - 1], tokens[i]));
        if (m_pending.size() >= pending_limit()) flush();
    }
}

void StaticCacheBuilder::add_count(token_t t0, token_t t1, token_t follower, uint64_t count) {
    m_pending_counted.emplace_back(pack_triple(t0, t1, follower), count);
    if (m_pending_counted.size() >= pending_limit()) flush();
}

void StaticCacheBuilder::add_entries(const uint64_t* words, const uint32_t* counts, size_t n) {
    flush(words, counts, n);
}

void StaticCacheBuilder::take_entries(std::vector<uint64_t>* words, std::vector<uint32_t>* counts) {
    flush();
    words->swap(m_entries);
    counts->swap(m_counts);
    std::vector<uint64_t>().swap(m_entries);
    std::vector<uint32_t>().swap(m_counts);
}

bool check_entries(const uint64_t* words, const uint32_t* counts, size_t n, uint32_t n_vocab,
                   std::string* error) {
    for (size_t i = 0; i < n; ++i) {
        const uint64_t w = words[i];
        if (i > 0 && w <= words[i - 1]) {
            *error = "entries are not strictly ascending at index " + std::to_string(i);
            return false;
        }
        const uint64_t tokens[3] = {w >> (2 * k_token_bits), (w >> k_token_bits) & k_token_mask, w & k_token_mask};
        if (tokens[0] >= n_vocab || tokens[1] >= n_vocab || tokens[2] >= n_vocab) {
            *error = "entry " + std::to_string(i) + " has a token outside the vocabulary [0, " +
                     std::to_string(n_vocab) + ")";
            return false;
        }
        if (counts[i] == 0) {
            *error = "entry " + std::to_string(i) + " has a count of zero";
            return false;
        }
    }
    return true;
}

void StaticCacheBuilder::flush(const uint64_t* more_words, const uint32_t* more_counts, size_t n_more) {
    std::sort(m_pending.begin(), m_pending.end());
    std::sort(m_pending_counted.begin(), m_pending_counted.end());
    std::vector<uint64_t> counted_words(m_pending_counted.size());
    std::vector<uint64_t> counted_counts(m_pending_counted.size());
    for (size_t i = 0; i < m_pending_counted.size(); ++i) {
        counted_words[i] = m_pending_counted[i].first;
        counted_counts[i] = m_pending_counted[i].second;
    }
    std::vector<std::pair<uint64_t, uint64_t>>().swap(m_pending_counted);

    auto make_runs = [&]() -> std::array<SortedRun, 4> {
        return {SortedRun{m_entries.data(), m_counts.data(), nullptr, m_entries.size()},
                SortedRun{m_pending.data(), nullptr, nullptr, m_pending.size()},
                SortedRun{counted_words.data(), nullptr, counted_counts.data(), counted_words.size()},
                SortedRun{more_words, more_counts, nullptr, n_more}};
    };
    // Two passes, counting first, so the merged arrays are allocated at their exact size: the
    // old and the new entries side by side are this builder's peak memory.
    size_t n_merged = 0;
    std::array<SortedRun, 4> runs = make_runs();
    merge_runs(runs, [&](uint64_t, uint64_t) { ++n_merged; });
    std::vector<uint64_t> entries;
    std::vector<uint32_t> counts;
    entries.reserve(n_merged);
    counts.reserve(n_merged);
    runs = make_runs();
    merge_runs(runs, [&](uint64_t word, uint64_t count) {
        entries.push_back(word);
        // Counts saturate rather than wrap: a 4-billion-fold 2-gram still drafts the same.
        counts.push_back(static_cast<uint32_t>(std::min<uint64_t>(count, 0xFFFFFFFFu)));
    });
    m_entries.swap(entries);
    m_counts.swap(counts);
    // Reserved once at its limit: growing by doubling would briefly hold two copies.
    std::vector<uint64_t>().swap(m_pending);
    m_pending.reserve(pending_limit());
}

size_t StaticCacheBuilder::pending_limit() const { return std::max(k_min_pending, m_entries.size() / 4); }

size_t StaticCacheBuilder::memory_bytes() const {
    return m_pending.capacity() * 8 + m_pending_counted.capacity() * 16 + m_entries.capacity() * 8 +
           m_counts.capacity() * 4;
}

bool StaticCacheBuilder::write(const std::string& path, uint64_t tokenizer_fingerprint,
                               StaticHeader* written, std::string* error) {
    flush();

    // Records in packed-key order first, with spans pointing into m_entries...
    std::vector<StaticRecord> by_key;
    for (size_t i = 0; i < m_entries.size();) {
        const uint64_t pair = triple_pair(m_entries[i]);
        size_t end = i + 1;
        while (end < m_entries.size() && triple_pair(m_entries[end]) == pair) ++end;
        StaticFallback fallback;
        for (size_t f = i; f < end; ++f) fallback.add(triple_follower(m_entries[f]), m_counts[f]);
        by_key.push_back({with_fallback(pair, fallback.decision()), pack_span(i, end - i)});
        i = end;
    }
    const uint64_t n_keys = by_key.size();
    // Packed pairs order by (t1, t0), not as the entries do.
    std::sort(by_key.begin(), by_key.end(), [](const StaticRecord& a, const StaticRecord& b) {
        return (a.key & k_pair_mask) < (b.key & k_pair_mask);
    });

    // ...then grouped by bucket (a stable counting sort keeps keys ascending inside a bucket).
    const StaticLayout layout = static_layout(n_keys, m_entries.size());
    const int bucket_bits = layout.bucket_bits;
    const uint64_t n_buckets = layout.n_buckets;
    std::vector<uint32_t> buckets(n_buckets + 1, 0);
    for (const StaticRecord& r : by_key) ++buckets[bucket_of(r.key, bucket_bits) + 1];
    for (uint64_t b = 0; b < n_buckets; ++b) buckets[b + 1] += buckets[b];
    std::vector<StaticRecord> records(n_keys);
    {
        std::vector<uint32_t> next(buckets.begin(), buckets.end() - 1);
        for (const StaticRecord& r : by_key) records[next[bucket_of(r.key, bucket_bits)]++] = r;
    }
    std::vector<StaticRecord>().swap(by_key);

    StaticHeader h{};
    std::memcpy(h.magic, k_static_magic, sizeof h.magic);
    h.format_version = k_static_format_version;
    h.byte_order_mark = k_byte_order_mark;
    h.ngram_order = k_static_ngram;
    h.n_vocab = m_n_vocab;
    h.tokenizer_fingerprint = tokenizer_fingerprint;
    h.n_keys = n_keys;
    h.n_followers = m_entries.size();
    h.n_buckets = n_buckets;
    for (uint32_t c : m_counts) h.total_count += c;
    h.buckets_offset = layout.buckets_offset;
    h.records_offset = layout.records_offset;
    h.followers_offset = layout.followers_offset;
    h.file_size = layout.file_size;

    AtomicFile file(path);
    ChecksummedWriter out(file);
    out.write(&h, sizeof h);
    out.pad_to(h.buckets_offset);
    out.write(buckets.data(), buckets.size() * sizeof(uint32_t));
    out.pad_to(h.records_offset);
    // Followers are laid out in record order, so each record's file span is the running offset;
    // `records` keeps its spans into m_entries for the second pass.
    std::vector<StaticRecord> chunk;
    chunk.reserve(4096);
    uint64_t offset = 0;
    for (const StaticRecord& r : records) {
        const uint64_t length = r.span >> k_span_offset_bits;
        chunk.push_back({r.key, pack_span(offset, length)});
        offset += length;
        if (chunk.size() == chunk.capacity()) {
            out.write(chunk.data(), chunk.size() * sizeof(StaticRecord));
            chunk.clear();
        }
    }
    out.write(chunk.data(), chunk.size() * sizeof(StaticRecord));
    out.pad_to(h.followers_offset);
    std::vector<Follower> followers;
    followers.reserve(4096);
    for (const StaticRecord& r : records) {
        const uint64_t first = r.span & k_span_offset_mask;
        const uint64_t last = first + (r.span >> k_span_offset_bits);
        for (uint64_t i = first; i < last; ++i) {
            followers.push_back({triple_follower(m_entries[i]), m_counts[i]});
            if (followers.size() == followers.capacity()) {
                out.write(followers.data(), followers.size() * sizeof(Follower));
                followers.clear();
            }
        }
    }
    out.write(followers.data(), followers.size() * sizeof(Follower));
    h.checksum = out.digest();
    file.write_at(offsetof(StaticHeader, checksum), &h.checksum, sizeof h.checksum);
    if (!file.commit(error)) return false;
    *written = h;
    return true;
}

}  // namespace lookup
