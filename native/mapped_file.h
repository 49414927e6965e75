// A read-only memory mapping of a whole file (POSIX).
#pragma once

#include <cstddef>
#include <string>

namespace lookup {

class MappedFile {
public:
    MappedFile() = default;
    MappedFile(MappedFile&& other) noexcept;
    MappedFile& operator=(MappedFile&& other) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    ~MappedFile();

    // On failure returns false and sets `error` to a short reason (no path: callers add it).
    bool open(const std::string& path, std::string* error);
    void close();

    [[nodiscard]] const unsigned char* data() const { return m_data; }
    [[nodiscard]] size_t size() const { return m_size; }

private:
    const unsigned char* m_data = nullptr;
    size_t m_size = 0;
    bool m_mapped = false;  // an empty file has no mapping
};

}  // namespace lookup
