#include "vocabulary_texts.h"

#include <algorithm>
#include <cstring>
#include <string_view>

namespace lookup {
namespace {

void append_le(std::string& out, uint32_t value) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

TokenTexts token_pieces(TokenToPieceFn to_piece, const void* vocab, int32_t n_vocab) {
    TokenTexts out;
    out.offsets.reserve(static_cast<size_t>(n_vocab) + 1);
    out.offsets.push_back(0);
    std::string buffer(256, '\0');
    for (int32_t token = 0; token < n_vocab; ++token) {
        int32_t length = to_piece(vocab, token, buffer.data(), static_cast<int32_t>(buffer.size()), 0, false);
        if (length < 0) {  // longer than the buffer: -length is what it needs
            buffer.resize(static_cast<size_t>(-length));
            length = to_piece(vocab, token, buffer.data(), static_cast<int32_t>(buffer.size()), 0, false);
        }
        out.bytes.append(buffer.data(), static_cast<size_t>(std::max(0, length)));
        out.offsets.push_back(static_cast<uint32_t>(out.bytes.size()));
    }
    return out;
}

std::string vocabulary_record(TokenTextFn text, TokenAttrFn attr, const void* vocab, int32_t n_vocab) {
    std::string out;
    for (int32_t token = 0; token < n_vocab; ++token) {
        const char* stored = text(vocab, token);
        const size_t length = stored != nullptr ? std::strlen(stored) : 0;
        append_le(out, static_cast<uint32_t>(length));
        append_le(out, static_cast<uint32_t>(attr(vocab, token)));
        out.append(stored != nullptr ? stored : "", length);
    }
    return out;
}

std::vector<int32_t> ids_by_text(const TokenTexts& texts) {
    const size_t n = texts.offsets.empty() ? 0 : texts.offsets.size() - 1;
    auto text_of = [&](int32_t id) {
        const uint32_t begin = texts.offsets[static_cast<size_t>(id)];
        return std::string_view(texts.bytes).substr(begin, texts.offsets[static_cast<size_t>(id) + 1] - begin);
    };
    std::vector<int32_t> ids;
    ids.reserve(n);
    for (size_t id = 0; id < n; ++id) {
        if (texts.offsets[id + 1] > texts.offsets[id]) ids.push_back(static_cast<int32_t>(id));
    }
    // string_view compares as unsigned bytes (char_traits<char>::compare is memcmp), as Python's
    // bytes do; stable, so equal texts keep id order, as Python's sorted did.
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return text_of(a) < text_of(b); });
    return ids;
}

}  // namespace lookup
