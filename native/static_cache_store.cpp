#include "static_cache_store.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <random>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace lookup {

namespace {

constexpr size_t k_copy_chunk = size_t{1} << 20;
constexpr int k_name_attempts = 16;
constexpr int64_t k_stale_staged_ns = int64_t{3600} * 1000000000;
constexpr const char* k_copy_suffix = ".lacache";
constexpr const char* k_staged_suffix = ".staged";

[[nodiscard]] std::string random_hex() {
    std::random_device source;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%08x%08x", static_cast<unsigned>(source()), static_cast<unsigned>(source()));
    return hex;
}

[[nodiscard]] bool ends_with(const std::string& s, const char* suffix) {
    const size_t n = std::strlen(suffix);
    return s.size() > n && s.compare(s.size() - n, n, suffix) == 0;
}

[[nodiscard]] int64_t modified_ns(const struct stat& st) {
#ifdef __APPLE__
    const struct timespec& t = st.st_mtimespec;
#else
    const struct timespec& t = st.st_mtim;
#endif
    return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

[[nodiscard]] int64_t now_ns() {
    struct timespec t {};
    ::clock_gettime(CLOCK_REALTIME, &t);
    return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

[[nodiscard]] bool write_all(int fd, const unsigned char* p, size_t size) {
    while (size > 0) {
        const ssize_t n = ::write(fd, p, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        p += n;
        size -= static_cast<size_t>(n);
    }
    return true;
}

// Copies all of `source` into `to`: in the kernel where it can (Linux: copy_file_range, which
// shares extents on file systems that can), else through a bounded buffer. On failure sets
// `error`, and `store_failed` unless the source was at fault (shorter than its size said).
[[nodiscard]] bool copy_contents(const ReadableFile& source, int to, std::string* error, bool* store_failed) {
    const uint64_t size = source.size();
    uint64_t done = 0;
#ifdef __linux__
    for (off_t offset = 0; done < size;) {
        const ssize_t n = ::copy_file_range(source.fd(), &offset, to, nullptr,
                                            static_cast<size_t>(std::min<uint64_t>(size - done, 1u << 30)), 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && done == 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
            break;  // not between these files: through the buffer below
        }
        if (n < 0) {
            *error = std::string("cannot write a copy in the store (") + std::strerror(errno) + ")";
            return false;
        }
        if (n == 0) {
            *error = "truncated while being read";
            *store_failed = false;
            return false;
        }
        done += static_cast<uint64_t>(n);
    }
#endif
    std::vector<unsigned char> buffer(static_cast<size_t>(std::min<uint64_t>(k_copy_chunk, size - done)));
    while (done < size) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), size - done));
        if (!source.read_at(done, buffer.data(), n, error)) {
            *store_failed = false;
            return false;
        }
        if (!write_all(to, buffer.data(), n)) {
            *error = std::string("cannot write a copy in the store (") + std::strerror(errno) + ")";
            return false;
        }
        done += n;
    }
    return true;
}

[[nodiscard]] std::string folder_problem(const struct stat& st) {
    if (!S_ISDIR(st.st_mode)) return "not a folder";
    if (st.st_uid != ::geteuid()) return "owned by another user";
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) return "writable by other users";
    return {};
}

}  // namespace

StaticCacheStore::~StaticCacheStore() {
    if (m_folder >= 0) ::close(m_folder);
}

bool StaticCacheStore::open(const std::string& folder, std::string* error) {
    const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    int fd = ::open(folder.c_str(), flags);
    if (fd < 0 && errno == ENOENT && ::mkdir(folder.c_str(), 0700) == 0) fd = ::open(folder.c_str(), flags);
    if (fd < 0) {
        struct stat st {};
        const bool link = ::lstat(folder.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
        *error = folder + ": " + (link ? "a symbolic link, which is not followed" : std::strerror(errno));
        return false;
    }
    struct stat st {};
    std::string problem = ::fstat(fd, &st) != 0 ? std::strerror(errno) : folder_problem(st);
    if (!problem.empty()) {
        ::close(fd);
        *error = folder + ": " + problem;
        return false;
    }
    m_folder = fd;
    return true;
}

std::string StaticCacheStore::key(const StaticHeader& header) {
    char name[64];
    std::snprintf(name, sizeof name, "%016llx-%llu.v%u", static_cast<unsigned long long>(header.checksum),
                  static_cast<unsigned long long>(header.file_size), k_store_version);
    return name;
}

bool StaticCacheStore::find(const StaticHeader& header, FileBytes* bytes) {
    ReadableFile copy;
    std::string ignored;
    if (!copy.open_at(m_folder, key(header) + k_copy_suffix, &ignored)) return false;
    StaticHeader stored;
    const bool same = copy.owner() == ::geteuid() && copy.size() == header.file_size &&
                      copy.read_at(0, &stored, sizeof stored, &ignored) &&
                      std::memcmp(&stored, &header, sizeof header) == 0;
    if (!same || !bytes->map(copy, &ignored)) return false;
    ::futimens(copy.fd(), nullptr);  // most recently used: kept longest by prune()
    return true;
}

bool StaticCacheStore::stage(const ReadableFile& source, FileBytes* bytes, std::string* staged, std::string* error,
                             bool* store_failed) {
    *store_failed = true;
    int fd = -1;
    std::string name;
    for (int attempt = 0; attempt < k_name_attempts && fd < 0; ++attempt) {
        name = random_hex() + k_staged_suffix;
        fd = ::openat(m_folder, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        *error = std::string("cannot create a copy in the store (") + std::strerror(errno) + ")";
        return false;
    }
    bool ok = copy_contents(source, fd, error, store_failed);
    if (ok && (::fchmod(fd, 0400) != 0 || ::fsync(fd) != 0)) {
        *error = std::string("cannot write a copy in the store (") + std::strerror(errno) + ")";
        ok = false;
    }
    ::close(fd);
    ReadableFile copy;
    std::string reason = "its size changed";
    const bool mapped =
        ok && copy.open_at(m_folder, name, &reason) && copy.size() == source.size() && bytes->map(copy, &reason);
    if (ok && !mapped) {
        *error = "cannot map the copy in the store (" + reason + ")";
        ok = false;
    }
    if (!ok) {
        ::unlinkat(m_folder, name.c_str(), 0);
        return false;
    }
    *staged = name;
    return true;
}

void StaticCacheStore::commit(const std::string& staged, const StaticHeader& header) {
    const std::string name = key(header) + k_copy_suffix;
    if (::renameat(m_folder, staged.c_str(), m_folder, name.c_str()) != 0) {
        ::unlinkat(m_folder, staged.c_str(), 0);
        return;
    }
    ::fsync(m_folder);
    prune();
}

void StaticCacheStore::discard(const std::string& staged) { ::unlinkat(m_folder, staged.c_str(), 0); }

void StaticCacheStore::prune() {
    const int listing = ::dup(m_folder);
    if (listing < 0) return;
    DIR* dir = ::fdopendir(listing);
    if (dir == nullptr) {
        ::close(listing);
        return;
    }
    ::rewinddir(dir);
    struct Copy {
        int64_t used_ns;
        uint64_t size;
        std::string name;
    };
    std::vector<Copy> copies;
    const int64_t now = now_ns();
    while (const struct dirent* entry = ::readdir(dir)) {
        const std::string name = entry->d_name;
        struct stat st {};
        if (::fstatat(m_folder, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
        if (ends_with(name, k_copy_suffix)) {
            copies.push_back({modified_ns(st), static_cast<uint64_t>(st.st_size), name});
        } else if (ends_with(name, k_staged_suffix) && now - modified_ns(st) > k_stale_staged_ns) {
            ::unlinkat(m_folder, name.c_str(), 0);
        }
    }
    ::closedir(dir);
    std::sort(copies.begin(), copies.end(), [](const Copy& a, const Copy& b) { return a.used_ns > b.used_ns; });
    uint64_t kept_bytes = 0;
    for (size_t i = 0; i < copies.size(); ++i) {
        const bool keep = i == 0 || (i < k_store_keep && kept_bytes + copies[i].size <= k_store_bytes);
        if (keep) {
            kept_bytes += copies[i].size;
        } else {
            ::unlinkat(m_folder, copies[i].name.c_str(), 0);
        }
    }
}

}  // namespace lookup
