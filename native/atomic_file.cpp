#include "atomic_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>
#include <utility>

namespace lookup {

namespace {

constexpr size_t k_buffer_bytes = size_t{1} << 16;

}  // namespace

AtomicFile::AtomicFile(std::string path)
    : m_path(std::move(path)), m_tmp_path(m_path + ".tmp." + std::to_string(::getpid())) {
    m_fd = ::open(m_tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (m_fd < 0) m_errno = errno;
    m_buffer.reserve(k_buffer_bytes);
}

AtomicFile::~AtomicFile() {
    if (m_fd >= 0) ::close(m_fd);
    if (!m_committed) ::unlink(m_tmp_path.c_str());
}

void AtomicFile::write(const void* data, size_t size) {
    const auto* p = static_cast<const unsigned char*>(data);
    while (size > 0 && m_errno == 0) {
        const size_t take = std::min(size, k_buffer_bytes - m_buffer.size());
        m_buffer.insert(m_buffer.end(), p, p + take);
        p += take;
        size -= take;
        if (m_buffer.size() == k_buffer_bytes) flush();
    }
}

void AtomicFile::flush() {
    const unsigned char* p = m_buffer.data();
    size_t left = m_buffer.size();
    while (left > 0 && m_errno == 0) {
        const ssize_t n = ::write(m_fd, p, left);
        if (n < 0) {
            if (errno != EINTR) m_errno = errno;
            continue;
        }
        p += n;
        left -= static_cast<size_t>(n);
    }
    m_buffer.clear();
}

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
    if (m_errno == 0 && ::rename(m_tmp_path.c_str(), m_path.c_str()) != 0) m_errno = errno;
    if (m_errno != 0) {
        *error = std::string("cannot write (") + std::strerror(m_errno) + ")";
        return false;
    }
    m_committed = true;
    return true;
}

}  // namespace lookup
