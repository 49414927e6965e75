#include "file_bytes.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

namespace lookup {

namespace {

// One read() call at most (macOS refuses counts above INT_MAX).
constexpr size_t k_read_chunk = size_t{1} << 30;

[[nodiscard]] int64_t nanoseconds(const struct timespec& t) {
    return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

[[nodiscard]] FileIdentity identity_of(const struct stat& st) {
#ifdef __APPLE__
    const struct timespec &modified = st.st_mtimespec, &changed = st.st_ctimespec;
#else
    const struct timespec &modified = st.st_mtim, &changed = st.st_ctim;
#endif
    return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_size),
            nanoseconds(modified), nanoseconds(changed)};
}

[[nodiscard]] std::string not_regular(mode_t mode) {
    const char* kind = S_ISDIR(mode)    ? "a directory"
                       : S_ISLNK(mode)  ? "a symbolic link, which is not followed"
                       : S_ISFIFO(mode) ? "a FIFO"
                       : S_ISSOCK(mode) ? "a socket"
                       : S_ISCHR(mode)  ? "a character device"
                       : S_ISBLK(mode)  ? "a block device"
                                        : "of an unknown kind";
    return std::string("not a regular file (") + kind + ")";
}

// The private copy costs the file's size in memory: refuse what would exhaust it.
[[nodiscard]] uint64_t readable_limit() {
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long page_size = ::sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page_size <= 0) return UINT64_MAX;
    return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size) / 2;
}

// Why `path` could not be opened: its kind if it is not a regular file, else the error.
[[nodiscard]] std::string open_failure(const std::string& path, int error) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return not_regular(st.st_mode);
    return std::strerror(error);
}

[[nodiscard]] bool read_all(int fd, unsigned char* out, size_t size, std::string* error) {
    size_t done = 0;
    while (done < size) {
        const ssize_t n = ::pread(fd, out + done, std::min(size - done, k_read_chunk), static_cast<off_t>(done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            *error = std::strerror(errno);
            return false;
        }
        if (n == 0) {
            *error = "truncated while being read";
            return false;
        }
        done += static_cast<size_t>(n);
    }
    return true;
}

// A descriptor of the regular file at `path` and its status, or -1 with `error` set.
[[nodiscard]] int open_regular(const std::string& path, struct stat* st, std::string* error) {
    // O_NONBLOCK: opening a FIFO would otherwise wait for a writer. It changes nothing for the
    // regular files that are read.
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        *error = open_failure(path, errno);
        return -1;
    }
    if (::fstat(fd, st) != 0) {
        *error = std::strerror(errno);
    } else if (!S_ISREG(st->st_mode)) {
        *error = not_regular(st->st_mode);
    } else if (static_cast<uint64_t>(st->st_size) > readable_limit()) {
        *error = "larger than half of this machine's memory (" + std::to_string(readable_limit() >> 20) +
                 " MiB), not read";
    } else {
        return fd;
    }
    ::close(fd);
    return -1;
}

// Private, read-only, page-aligned memory holding the first `size` bytes of `fd`, or nullptr
// with `error` set.
[[nodiscard]] const unsigned char* read_private(int fd, size_t size, std::string* error) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        *error = std::strerror(errno);
        return nullptr;
    }
#ifdef MADV_HUGEPAGE
    // Advice only (Linux): look-ups hop across the whole file, so fewer TLB misses help.
    ::madvise(p, size, MADV_HUGEPAGE);
#endif
    if (!read_all(fd, static_cast<unsigned char*>(p), size, error)) {
        ::munmap(p, size);
        return nullptr;
    }
    ::mprotect(p, size, PROT_READ);
    return static_cast<const unsigned char*>(p);
}

}  // namespace

bool identity_at(const std::string& path, FileIdentity* identity) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return false;
    *identity = identity_of(st);
    return true;
}

FileBytes::FileBytes(FileBytes&& other) noexcept { *this = std::move(other); }

FileBytes& FileBytes::operator=(FileBytes&& other) noexcept {
    if (this != &other) {
        close();
        m_data = std::exchange(other.m_data, nullptr);
        m_size = std::exchange(other.m_size, 0);
        m_identity = other.m_identity;
    }
    return *this;
}

FileBytes::~FileBytes() { close(); }

bool FileBytes::read(const std::string& path, std::string* error) {
    close();
    struct stat st {};
    const int fd = open_regular(path, &st, error);
    if (fd < 0) return false;
    const auto size = static_cast<size_t>(st.st_size);
    const unsigned char* data = size == 0 ? nullptr : read_private(fd, size, error);
    ::close(fd);
    if (size > 0 && data == nullptr) return false;
    m_data = data;
    m_size = size;
    m_identity = identity_of(st);
    return true;
}

void FileBytes::close() {
    if (m_data != nullptr) ::munmap(const_cast<unsigned char*>(m_data), m_size);
    m_data = nullptr;
    m_size = 0;
    m_identity = {};
}

}  // namespace lookup
