#include "upstream_format.h"

#include "mapped_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>
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

// Builds the file in memory, then writes it through a temporary file and a rename.
class UpstreamWriter {
public:
    void add(NgramKey key, const FollowerSpan& span) {
        const std::vector<Follower> followers = sorted_followers(span);
        for (int i = 0; i < k_ngram_max; ++i) put(key_token(key, i));
        put(static_cast<int32_t>(followers.size()));
        for (const Follower& f : followers) {
            put(f.token);
            put(static_cast<int32_t>(std::min<uint32_t>(f.count, 0x7FFFFFFF)));
        }
    }

    bool commit(const std::string& path, std::string* error) {
        const std::string tmp_path = path + ".tmp." + std::to_string(::getpid());
        const int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        int err = fd < 0 ? errno : 0;
        const unsigned char* p = reinterpret_cast<const unsigned char*>(m_words.data());
        size_t left = m_words.size() * sizeof(int32_t);
        while (err == 0 && left > 0) {
            const ssize_t n = ::write(fd, p, left);
            if (n < 0 && errno != EINTR) err = errno;
            if (n > 0) {
                p += n;
                left -= static_cast<size_t>(n);
            }
        }
        if (err == 0 && ::fsync(fd) != 0) err = errno;
        if (fd >= 0 && ::close(fd) != 0 && err == 0) err = errno;
        if (err == 0 && ::rename(tmp_path.c_str(), path.c_str()) != 0) err = errno;
        if (err != 0) {
            ::unlink(tmp_path.c_str());
            *error = std::string("cannot write (") + std::strerror(err) + ")";
            return false;
        }
        return true;
    }

private:
    void put(int32_t v) { m_words.push_back(v); }
    std::vector<int32_t> m_words;
};

}  // namespace

bool load_upstream(const std::string& path, uint32_t n_vocab, NgramCache* cache, std::string* error) {
    MappedFile file;
    std::string reason;
    if (!file.open(path, &reason)) {
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
    UpstreamWriter writer;
    cache.for_each([&](NgramKey key, const FollowerSpan& followers) { writer.add(key, followers); });
    return writer.commit(path, error);
}

bool save_upstream(const std::string& path, const StaticCache& cache, std::string* error) {
    UpstreamWriter writer;
    cache.for_each([&](token_t t0, token_t t1, const FollowerSpan& followers) {
        const token_t pair[2] = {t0, t1};
        writer.add(make_key(pair, 2), followers);
    });
    return writer.commit(path, error);
}

}  // namespace lookup
