#include "text_windows.h"

#include <algorithm>
#include <cstdint>
#include <iterator>

namespace lookup {
namespace {

constexpr uint64_t k_fnv_offset = 0xcbf29ce484222325ULL;
constexpr uint64_t k_fnv_prime = 0x100000001b3ULL;
constexpr size_t k_min_term = 3;

bool is_upper(unsigned char c) { return c >= 'A' && c <= 'Z'; }

bool is_lower(unsigned char c) { return c >= 'a' && c <= 'z'; }

bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

bool is_identifier_byte(unsigned char c) { return is_lower(c) || is_upper(c) || is_digit(c) || c == '_'; }

// Sorts and dedups `found`, leaves out what `left_out` (sorted) holds, and appends the rest to out.
void append_distinct(std::vector<TermHash>& found, const std::vector<TermHash>& left_out, std::vector<TermHash>& out) {
    std::sort(found.begin(), found.end());
    found.erase(std::unique(found.begin(), found.end()), found.end());
    std::set_difference(found.begin(), found.end(), left_out.begin(), left_out.end(), std::back_inserter(out));
    found.clear();
}

// Calls both(b_at) for each term of sorted a that sorted b holds too, b_at being where in b.
template <typename Both>
void each_shared(const TermHash* a, const TermHash* a_end, const TermHash* b, const TermHash* b_end, Both both) {
    while (a != a_end && b != b_end) {
        if (*a < *b) {
            ++a;
        } else if (*b < *a) {
            ++b;
        } else {
            both(b);
            ++a, ++b;
        }
    }
}

// Calls take(hash, first_byte, line) for each term of text (text_windows.h), in order.
template <typename Take>
void each_term(std::string_view text, Take take) {
    uint32_t line = 0;
    const size_t n = text.size();
    uint64_t hash = k_fnv_offset;
    size_t length = 0;
    unsigned char first = 0;
    unsigned char previous = 0;
    const auto end_term = [&]() {
        if (length >= k_min_term) take(hash, first, line);
        hash = k_fnv_offset;
        length = 0;
    };
    for (size_t i = 0; i < n; ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (!is_identifier_byte(c) || c == '_' || (is_upper(c) && is_lower(previous))) end_term();
        previous = is_identifier_byte(c) ? c : 0;
        if (!is_identifier_byte(c)) {
            line += c == '\n';
            continue;
        }
        if (c == '_') continue;
        if (length == 0) first = c;
        hash = (hash ^ static_cast<unsigned char>(is_upper(c) ? c - 'A' + 'a' : c)) * k_fnv_prime;
        ++length;
    }
    end_term();
}

}  // namespace

std::vector<TermHash> query_terms(std::string_view text, const std::vector<TermHash>& left_out) {
    std::vector<TermHash> found;
    each_term(text, [&](TermHash hash, unsigned char first, uint32_t) {
        if (!is_digit(first)) found.push_back(hash);
    });
    std::vector<TermHash> out;
    append_distinct(found, left_out, out);
    return out;
}

TextWindows text_windows(std::string_view text, uint32_t block_lines, const std::vector<TermHash>& left_out) {
    const auto lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
    const size_t blocks = (lines + block_lines - 1) / block_lines;
    TextWindows out;
    out.starts.reserve(blocks + 1);
    out.starts.push_back(0);
    std::vector<TermHash> found;
    size_t block = 0;
    each_term(text, [&](TermHash hash, unsigned char, uint32_t line) {
        for (const size_t of_line = line / block_lines; block < of_line; ++block) {
            append_distinct(found, left_out, out.terms);
            out.starts.push_back(static_cast<uint32_t>(out.terms.size()));
        }
        found.push_back(hash);
    });
    for (; block < blocks; ++block) {
        append_distinct(found, left_out, out.terms);
        out.starts.push_back(static_cast<uint32_t>(out.terms.size()));
    }
    const size_t windows = lines > block_lines ? (lines - 1) / block_lines : 1;
    out.sizes.resize(windows);
    const TermHash* terms = out.terms.data();
    for (size_t w = 0; w < windows; ++w) {
        const TermHash* a = terms + out.starts[w];
        const TermHash* a_end = terms + out.starts[w + 1];
        // Where the text has one block, its only window's second block is empty.
        const TermHash* b_end = w + 1 < blocks ? terms + out.starts[w + 2] : a_end;
        const TermHash* b = a_end;
        uint32_t shared = 0;
        each_shared(a, a_end, b, b_end, [&](const TermHash*) { ++shared; });
        out.sizes[w] = static_cast<uint32_t>((a_end - a) + (b_end - b) - shared);
    }
    return out;
}

void window_similarities(const TextWindows& windows, const TermHash* query, size_t query_size, double* out) {
    const size_t blocks = windows.blocks();
    if (query_size == 0) {
        std::fill(out, out + windows.windows(), 0.0);
        return;
    }
    // met[b]: the query's terms in block b; twice[b]: those in blocks b and b + 1 both.
    std::vector<uint32_t> met(blocks + 1, 0);
    std::vector<uint32_t> twice(blocks + 1, 0);
    std::vector<uint32_t> last_block(query_size, UINT32_MAX);
    const TermHash* terms = windows.terms.data();
    const TermHash* query_end = query + query_size;
    for (size_t b = 0; b < blocks; ++b) {
        each_shared(terms + windows.starts[b], terms + windows.starts[b + 1], query, query_end, [&](const TermHash* q) {
            const auto at = static_cast<size_t>(q - query);
            ++met[b];
            if (b > 0 && last_block[at] == b - 1) ++twice[b - 1];
            last_block[at] = static_cast<uint32_t>(b);
        });
    }
    for (size_t w = 0; w < windows.windows(); ++w) {
        const size_t common = met[w] + met[w + 1] - twice[w];
        out[w] = static_cast<double>(common) / static_cast<double>(query_size + windows.sizes[w] - common);
    }
}

}  // namespace lookup
