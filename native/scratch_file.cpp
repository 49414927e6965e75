#include "scratch_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <random>
#include <unistd.h>

namespace lookup {

namespace {

constexpr size_t k_buffer_bytes = size_t{1} << 20;
constexpr int k_name_attempts = 16;

int open_named_then_unlink(const std::string& folder) {
    std::random_device source;
    for (int attempt = 0; attempt < k_name_attempts; ++attempt) {
        char name[40];
        std::snprintf(name, sizeof name, "/.scratch.%08x%08x", static_cast<unsigned>(source()),
                      static_cast<unsigned>(source()));
        const std::string path = folder + name;
        const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0) {
            ::unlink(path.c_str());
            return fd;
        }
        if (errno != EEXIST) return -1;
    }
    return -1;
}

}  // namespace

ScratchFile::ScratchFile(const std::string& folder) {
#ifdef O_TMPFILE
    m_fd = ::open(folder.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
#endif
    if (m_fd < 0) m_fd = open_named_then_unlink(folder);
    if (m_fd < 0) m_errno = errno != 0 ? errno : EIO;
    m_buffer.reserve(k_buffer_bytes);
}

ScratchFile::~ScratchFile() {
    if (m_fd >= 0) ::close(m_fd);
}

void ScratchFile::append(const void* data, size_t size) {
    const auto* p = static_cast<const unsigned char*>(data);
    while (size > 0 && m_errno == 0) {
        const size_t take = std::min(size, k_buffer_bytes - m_buffer.size());
        m_buffer.insert(m_buffer.end(), p, p + take);
        p += take;
        size -= take;
        if (m_buffer.size() == k_buffer_bytes) flush();
    }
}

void ScratchFile::flush() {
    const unsigned char* p = m_buffer.data();
    size_t left = m_buffer.size();
    while (left > 0 && m_errno == 0) {
        const ssize_t n = ::pwrite(m_fd, p, left, static_cast<off_t>(m_size));
        if (n < 0) {
            if (errno != EINTR) m_errno = errno;
            continue;
        }
        p += n;
        left -= static_cast<size_t>(n);
        m_size += static_cast<uint64_t>(n);
    }
    m_buffer.clear();
}

bool ScratchFile::finish_writing(std::string* error) {
    if (m_errno == 0) flush();
    std::vector<unsigned char>().swap(m_buffer);
    if (m_errno != 0) *error = reason("cannot write a scratch file");
    return m_errno == 0;
}

size_t ScratchFile::read_at(uint64_t offset, void* data, size_t size, std::string* error) const {
    auto* p = static_cast<unsigned char*>(data);
    size_t done = 0;
    while (done < size && offset + done < m_size) {
        const ssize_t n = ::pread(m_fd, p + done, size - done, static_cast<off_t>(offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            *error = n < 0 ? reason("cannot read the scratch file") : "the scratch file is shorter than written";
            return 0;
        }
        done += static_cast<size_t>(n);
    }
    return done;
}

std::string ScratchFile::reason(const char* what) const {
    return std::string(what) + " (" + std::strerror(m_errno != 0 ? m_errno : errno) + ")";
}

}  // namespace lookup
