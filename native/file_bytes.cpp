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

// Why `name` could not be opened: its kind if it is not a regular file, else the error.
[[nodiscard]] std::string open_failure(int folder_fd, const std::string& name, int error) {
    struct stat st {};
    if (::fstatat(folder_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode)) {
        return not_regular(st.st_mode);
    }
    return std::strerror(error);
}

}  // namespace

bool identity_at(const std::string& path, FileIdentity* identity) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return false;
    *identity = identity_of(st);
    return true;
}

bool ReadableFile::open_at(int folder_fd, const std::string& name, std::string* error) {
    close();
    const int folder = folder_fd < 0 ? AT_FDCWD : folder_fd;
    // O_NONBLOCK: opening a FIFO would otherwise wait for a writer. It changes nothing for the
    // regular files that are read.
    const int fd = ::openat(folder, name.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        *error = open_failure(folder, name, errno);
        return false;
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        *error = std::strerror(errno);
    } else if (!S_ISREG(st.st_mode)) {
        *error = not_regular(st.st_mode);
    } else {
        m_fd = fd;
        m_owner = static_cast<uint32_t>(st.st_uid);
        m_identity = identity_of(st);
        return true;
    }
    ::close(fd);
    return false;
}

void ReadableFile::close() {
    if (m_fd >= 0) ::close(m_fd);
    m_fd = -1;
    m_owner = 0;
    m_identity = {};
}

bool ReadableFile::read_at(uint64_t offset, void* out, size_t size, std::string* error) const {
    auto* p = static_cast<unsigned char*>(out);
    size_t done = 0;
    while (done < size) {
        const ssize_t n = ::pread(m_fd, p + done, std::min(size - done, k_read_chunk),
                                  static_cast<off_t>(offset + done));
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

FileBytes::FileBytes(FileBytes&& other) noexcept { *this = std::move(other); }

FileBytes& FileBytes::operator=(FileBytes&& other) noexcept {
    if (this != &other) {
        close();
        m_data = std::exchange(other.m_data, nullptr);
        m_size = std::exchange(other.m_size, 0);
        m_kind = std::exchange(other.m_kind, Kind::none);
    }
    return *this;
}

FileBytes::~FileBytes() { close(); }

bool FileBytes::read(const std::string& path, std::string* error) {
    ReadableFile file;
    return file.open(path, error) && read(file, error);
}

bool FileBytes::read(const ReadableFile& file, std::string* error) {
    close();
    const uint64_t size = file.size();
    if (size == 0) {
        m_kind = Kind::copied;
        return true;
    }
    if (size > readable_limit()) {
        *error = "larger than half of this machine's memory (" + std::to_string(readable_limit() >> 20) +
                 " MiB), not read";
        return false;
    }
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        *error = std::strerror(errno);
        return false;
    }
#ifdef MADV_HUGEPAGE
    // Advice only (Linux): look-ups hop across the whole file, so fewer TLB misses help.
    ::madvise(p, size, MADV_HUGEPAGE);
#endif
    if (!file.read_at(0, p, size, error)) {
        ::munmap(p, size);
        return false;
    }
    ::mprotect(p, size, PROT_READ);
    m_data = static_cast<const unsigned char*>(p);
    m_size = size;
    m_kind = Kind::copied;
    return true;
}

bool FileBytes::map(const ReadableFile& file, std::string* error) {
    close();
    const uint64_t size = file.size();
    if (size == 0) {
        m_kind = Kind::mapped;
        return true;
    }
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, file.fd(), 0);
    if (p == MAP_FAILED) {
        *error = std::strerror(errno);
        return false;
    }
#ifdef MADV_HUGEPAGE
    // Advice only: kernels that collapse read-only file mappings into huge pages may do so.
    ::madvise(p, size, MADV_HUGEPAGE);
#endif
    m_data = static_cast<const unsigned char*>(p);
    m_size = size;
    m_kind = Kind::mapped;
    return true;
}

void FileBytes::borrow(const unsigned char* data, size_t size) {
    close();
    m_data = data;
    m_size = size;
    m_kind = Kind::borrowed;
}

void FileBytes::close() {
    if (m_data != nullptr && (m_kind == Kind::copied || m_kind == Kind::mapped)) {
        ::munmap(const_cast<unsigned char*>(m_data), m_size);
    }
    m_data = nullptr;
    m_size = 0;
    m_kind = Kind::none;
}

}  // namespace lookup
