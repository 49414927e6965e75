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
        std::snprintf(name, sizeof name, "/scratch.tmp.%08x%08x", static_cast<unsigned>(source()),
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

ScratchFile::ScratchFile(const std::string& folder) : m_buffer(k_buffer_bytes) {
#ifdef O_TMPFILE
    m_fd = ::open(folder.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
#endif
    if (m_fd < 0) m_fd = open_named_then_unlink(folder);
    if (m_fd < 0) m_errno = errno != 0 ? errno : EIO;
}

ScratchFile::~ScratchFile() {
    if (m_fd >= 0) ::close(m_fd);
}

void ScratchFile::append(const void* data, size_t size) {
    m_buffer.write(m_fd, data, size, &m_errno);
    m_size += size;
}

bool ScratchFile::finish_writing(std::string* error) {
    m_buffer.flush(m_fd, &m_errno);
    m_buffer.release();
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
