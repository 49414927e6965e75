#include "atomic_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <random>
#include <unistd.h>
#include <utility>

namespace lookup {

namespace {

constexpr size_t k_buffer_bytes = size_t{1} << 16;
// A taken name is skipped for another; this many taken in a row means something else is wrong.
constexpr int k_name_attempts = 16;

// 64 random bits as hex: a name nobody can plant a file or link at in advance.
[[nodiscard]] std::string random_suffix() {
    std::random_device source;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%08x%08x", static_cast<unsigned>(source()), static_cast<unsigned>(source()));
    return hex;
}

// Makes a rename in the folder of `path` durable. Some file systems cannot sync a folder; the
// file itself is synced already, so a failure here is not reported.
void sync_folder(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    const std::string folder = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    ::fsync(fd);
    ::close(fd);
}

}  // namespace

AtomicFile::AtomicFile(std::string path, unsigned mode)
    : m_path(std::move(path)), m_mode(mode), m_buffer(k_buffer_bytes) {
    create_temporary();
}

AtomicFile::~AtomicFile() {
    if (m_fd >= 0) ::close(m_fd);
    if (!m_committed && !m_tmp_path.empty()) ::unlink(m_tmp_path.c_str());
}

void AtomicFile::create_temporary() {
    for (int attempt = 0; attempt < k_name_attempts && m_fd < 0; ++attempt) {
        m_tmp_path = m_path + ".tmp." + random_suffix();
        m_fd = ::open(m_tmp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, static_cast<mode_t>(m_mode));
        if (m_fd < 0 && errno != EEXIST) break;
    }
    if (m_fd < 0) {
        m_errno = errno;
        m_failed = "cannot create a temporary file beside it";
        m_tmp_path.clear();  // whatever is at that name is not ours to remove
    }
}

void AtomicFile::write(const void* data, size_t size) { m_buffer.write(m_fd, data, size, &m_errno); }

void AtomicFile::flush() { m_buffer.flush(m_fd, &m_errno); }

void AtomicFile::write_at(uint64_t offset, const void* data, size_t size) {
    flush();
    if (m_errno == 0 && ::pwrite(m_fd, data, size, static_cast<off_t>(offset)) != static_cast<ssize_t>(size)) {
        m_errno = errno != 0 ? errno : EIO;
    }
}

bool AtomicFile::commit(std::string* error) {
    if (m_errno == 0) flush();
    if (m_errno == 0 && ::fsync(m_fd) != 0) m_errno = errno;
    if (m_fd >= 0 && ::close(m_fd) != 0 && m_errno == 0) m_errno = errno;
    m_fd = -1;
    if (m_errno == 0 && ::rename(m_tmp_path.c_str(), m_path.c_str()) != 0) {
        m_errno = errno;
        m_failed = "cannot rename the temporary file over it";
    }
    if (m_errno != 0) {
        *error = std::string(m_failed) + " (" + std::strerror(m_errno) + ")";
        return false;
    }
    m_committed = true;
    sync_folder(m_path);
    return true;
}

}  // namespace lookup
