#include "upstream_format.h"

#include "atomic_file.h"
#include "file_bytes.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace lookup {

namespace {

constexpr size_t k_key_bytes = k_ngram_max * sizeof(int32_t);

[[nodiscard]] int32_t read_i32(const unsigned char* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// A key is valid when it holds 1..4 in-vocabulary tokens followed only by -1 padding.
[[nodiscard]] bool parse_key(const unsigned char* p, uint32_t n_vocab, token_t* tokens, int* n) {
    *n = 0;
    for (int i = 0; i < k_ngram_max; ++i) {
        const int32_t t = read_i32(p + 4 * i);
        if (t == -1) continue;
        if (t < 0 || static_cast<uint32_t>(t) >= n_vocab || *n != i) return false;
        tokens[(*n)++] = t;
    }
    return *n > 0;
}

// Streams records into an atomically replaced file.
class UpstreamWriter {
public:
    explicit UpstreamWriter(const std::string& path) : m_file(path) {}

    void add(NgramKey key, const FollowerSpan& span) {
        const std::vector<Follower> followers = sorted_followers(span);
        for (int i = 0; i < k_ngram_max; ++i) put(key_token(key, i));
        put(static_cast<int32_t>(followers.size()));
        for (const Follower& f : followers) {
            put(f.token);
            put(static_cast<int32_t>(std::min<uint32_t>(f.count, 0x7FFFFFFF)));
        }
    }
    bool commit(std::string* error) { return m_file.commit(error); }

private:
    void put(int32_t v) { m_file.write(&v, sizeof v); }
    AtomicFile m_file;
};

}  // namespace

bool load_upstream(const std::string& path, uint32_t n_vocab, NgramCache* cache, std::string* error) {
    FileBytes file;
    std::string reason;
    if (!file.read(path, &reason)) {
        *error = "cannot open (" + reason + ")";
        return false;
    }
    // Parse everything first so that a malformed file changes nothing.
    struct Entry {
        NgramKey key;
        token_t token;
        uint32_t count;
    };
    std::vector<Entry> entries;
    const unsigned char* p = file.data();
    const unsigned char* end = p + file.size();
    size_t record = 0;
    while (p != end) {
        const std::string where = " in record " + std::to_string(record) + " at byte " +
                                  std::to_string(p - file.data());
        if (static_cast<size_t>(end - p) < k_key_bytes + 4) {
            *error = "truncated" + where;
            return false;
        }
        token_t tokens[k_ngram_max];
        int n = 0;
        if (!parse_key(p, n_vocab, tokens, &n)) {
            *error = "invalid n-gram key" + where;
            return false;
        }
        const int32_t n_followers = read_i32(p + k_key_bytes);
        p += k_key_bytes + 4;
        if (n_followers <= 0) {
            *error = "invalid follower count" + where;
            return false;
        }
        if (static_cast<size_t>(end - p) / 8 < static_cast<size_t>(n_followers)) {
            *error = "truncated" + where;
            return false;
        }
        const NgramKey key = make_key(tokens, n);
        for (int32_t i = 0; i < n_followers; ++i, p += 8) {
            const int32_t token = read_i32(p);
            const int32_t count = read_i32(p + 4);
            if (token < 0 || static_cast<uint32_t>(token) >= n_vocab) {
                *error = "token " + std::to_string(token) + " outside the vocabulary" + where;
                return false;
            }
            if (count <= 0) {
                *error = "invalid count" + where;
                return false;
            }
            entries.push_back({key, token, static_cast<uint32_t>(count)});
        }
        ++record;
    }
    for (const Entry& e : entries) cache->add_count(e.key, e.token, e.count);
    return true;
}

bool save_upstream(const std::string& path, const NgramCache& cache, std::string* error) {
    UpstreamWriter writer(path);
    cache.for_each([&](NgramKey key, const FollowerSpan& followers) { writer.add(key, followers); });
    return writer.commit(error);
}

bool save_upstream(const std::string& path, const StaticCache& cache, std::string* error) {
    UpstreamWriter writer(path);
    cache.for_each([&](token_t t0, token_t t1, const FollowerSpan& followers) {
        const token_t pair[2] = {t0, t1};
        writer.add(make_key(pair, 2), followers);
    });
    return writer.commit(error);
}

}  // namespace lookup
