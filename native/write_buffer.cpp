#include "write_buffer.h"

#include <algorithm>
#include <cerrno>
#include <unistd.h>

namespace lookup {

void WriteBuffer::write(int fd, const void* data, size_t size, int* error) {
    const auto* p = static_cast<const unsigned char*>(data);
    while (size > 0 && *error == 0) {
        const size_t take = std::min(size, m_capacity - m_bytes.size());
        m_bytes.insert(m_bytes.end(), p, p + take);
        p += take;
        size -= take;
        if (m_bytes.size() == m_capacity) flush(fd, error);
    }
}

void WriteBuffer::flush(int fd, int* error) {
    const unsigned char* p = m_bytes.data();
    size_t left = m_bytes.size();
    while (left > 0 && *error == 0) {
        const ssize_t n = ::write(fd, p, left);
        if (n < 0) {
            if (errno != EINTR) *error = errno;
            continue;
        }
        p += n;
        left -= static_cast<size_t>(n);
    }
    m_bytes.clear();
}

}  // namespace lookup
