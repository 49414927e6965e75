#include "bindings.h"

#include "workspace_layers.h"

#include <algorithm>
#include <numeric>

namespace lookup_ext {

void raise_os_error(const std::string& path, const std::string& reason) {
    const std::string message = path + ": " + reason;
    PyErr_SetString(PyExc_OSError, message.c_str());
    throw py::error_already_set();
}

TokenArray as_tokens(const py::object& token_ids) {
    py::array arr = py::array::ensure(token_ids);
    if (!arr) throw py::value_error("tokens must be an array of token ids");
    if (arr.ndim() != 1) throw py::value_error("tokens must be a 1-D array of token ids");
    const char kind = arr.dtype().kind();
    if (arr.size() > 0 && kind != 'i' && kind != 'u') {
        throw py::value_error("tokens must be integers, not " + py::str(arr.dtype()).cast<std::string>());
    }
    if (arr.size() > 0 && !(kind == 'i' && arr.itemsize() == 4)) {
        const auto low = arr.attr("min")().cast<long double>();
        const auto high = arr.attr("max")().cast<long double>();
        if (low < 0 || high > 0x7FFFFFFF) throw py::value_error("token ids must be in [0, 2**31)");
    }
    return TokenArray::ensure(arr);
}

void check_tokens(const token_t* tokens, size_t n, uint32_t n_vocab) {
    for (size_t i = 0; i < n; ++i) {
        if (tokens[i] < 0 || static_cast<uint32_t>(tokens[i]) >= n_vocab) {
            throw py::value_error("token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                                  " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
        }
    }
}

uint32_t checked_vocab(int64_t n_vocab) {
    if (n_vocab <= 0 || n_vocab > 0x7FFFFFFF) throw py::value_error("n_vocab must be in [1, 2**31)");
    return static_cast<uint32_t>(n_vocab);
}

LockedSources::LockedSources(PyNgramCache* context, const WorkspaceArg& workspace, PyStaticCache* repository) {
    if (context != nullptr) context_lock = std::shared_lock(context->mutex);
    if (workspace.added != nullptr && workspace.added != context) {
        workspace_lock = std::shared_lock(workspace.added->mutex);
    }
    if (workspace.removed != nullptr && workspace.removed != context && workspace.removed != workspace.added) {
        removed_lock = std::shared_lock(workspace.removed->mutex);
    }
    if (repository != nullptr) {
        repository_lock = std::shared_lock(repository->mutex);
        // Closed by another thread since the inputs were checked.
        if (!repository->cache) throw std::invalid_argument(repository->path + ": static cache is closed");
    }
    const lookup::WorkspaceLayers layers{workspace.added ? &workspace.added->cache : nullptr,
                                         workspace.removed ? &workspace.removed->cache : nullptr,
                                         workspace.table ? workspace.table->table.get() : nullptr};
    sources = {context ? &context->cache : nullptr, layers, repository ? repository->cache.get() : nullptr};
}

py::array_t<token_t> followers_copy(const lookup::FollowerSpan& span) {
    const std::vector<lookup::Follower> followers = lookup::sorted_followers(span);
    py::array_t<token_t> out({static_cast<py::ssize_t>(followers.size()), py::ssize_t{2}});
    auto* p = out.mutable_data();
    for (size_t i = 0; i < followers.size(); ++i) {
        p[2 * i] = followers[i].token;
        p[2 * i + 1] = static_cast<token_t>(std::min<uint32_t>(followers[i].count, 0x7FFFFFFF));
    }
    return out;
}

std::optional<lookup::NgramKey> checked_key(const std::vector<int64_t>& key, uint32_t n_vocab) {
    if (key.empty() || key.size() > static_cast<size_t>(lookup::k_ngram_max)) {
        throw py::value_error("a key holds 1 to 4 tokens");
    }
    token_t t[lookup::k_ngram_max];
    for (size_t i = 0; i < key.size(); ++i) {
        if (key[i] < 0 || key[i] >= n_vocab) return std::nullopt;
        t[i] = static_cast<token_t>(key[i]);
    }
    return lookup::make_key(t, static_cast<int>(key.size()));
}

py::dict header_dict(const lookup::StaticHeader& h) {
    py::dict d;
    d["format_version"] = h.format_version;
    d["ngram_order"] = h.ngram_order;
    d["n_vocab"] = h.n_vocab;
    d["fingerprint"] = h.tokenizer_fingerprint;
    d["n_keys"] = h.n_keys;
    d["n_followers"] = h.n_followers;
    d["n_buckets"] = h.n_buckets;
    d["total_count"] = h.total_count;
    d["file_size"] = h.file_size;
    d["checksum"] = h.checksum;
    return d;
}

void CacheArrays::add(lookup::NgramKey key, const lookup::FollowerSpan& span) {
    keys.push_back(key);
    followers.push_back(lookup::sorted_followers(span));
}

py::tuple CacheArrays::to_numpy() const {
    std::vector<size_t> order(keys.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return keys[a] < keys[b]; });
    size_t n_followers = 0;
    for (const auto& f : followers) n_followers += f.size();
    py::array_t<token_t> out_keys({static_cast<py::ssize_t>(keys.size()), py::ssize_t{4}});
    py::array_t<int64_t> out_offsets(static_cast<py::ssize_t>(keys.size() + 1));
    py::array_t<token_t> out_followers({static_cast<py::ssize_t>(n_followers), py::ssize_t{2}});
    token_t* k = out_keys.mutable_data();
    int64_t* o = out_offsets.mutable_data();
    token_t* f = out_followers.mutable_data();
    int64_t at = 0;
    for (size_t i = 0; i < order.size(); ++i) {
        for (int j = 0; j < 4; ++j) k[4 * i + j] = lookup::key_token(keys[order[i]], j);
        o[i] = at;
        for (const lookup::Follower& fw : followers[order[i]]) {
            f[2 * at] = fw.token;
            f[2 * at + 1] = static_cast<token_t>(std::min<uint32_t>(fw.count, 0x7FFFFFFF));
            ++at;
        }
    }
    o[order.size()] = at;
    return py::make_tuple(out_keys, out_offsets, out_followers);
}

}  // namespace lookup_ext
